"""``codevolve kernelbench`` picks the job a set continues: the newest of the same problem."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from codevolve.core.config import RunConfig
from codevolve.services.cli.kernelbench import _same_job


def _job(name: str, **config: Any) -> Any:
    return SimpleNamespace(id=name, config=RunConfig(**config))


def test_the_newest_matching_job_is_continued_and_other_budgets_are_not() -> None:
    config = RunConfig(problem="bundle:a", seed=0, max_proposals=8)
    stored = [  # newest first, as repository.list_jobs returns them
        _job("other budget", problem="bundle:a", seed=0, max_proposals=9),
        _job("newer", problem="bundle:a", seed=0, max_proposals=8),
        _job("older", problem="bundle:a", seed=0, max_proposals=8),
        _job("other problem", problem="bundle:b", seed=0, max_proposals=8),
    ]
    found = _same_job(stored, config)
    assert found is not None and found.id == "newer"
    assert _same_job(stored[3:], config) is None
