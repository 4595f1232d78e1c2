"""The simulated proposer never reads a prompt's text: it is rendered only when prompts are
stored, and then stored with every proposal."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from codevolve.core.config import RunConfig
from codevolve.evaluator_workers.local_queue import LocalQueue
from tests.unit.services.controller.controller_support import run_job


@pytest.mark.parametrize("log_prompts", [True, False])
async def test_a_simulated_run_stores_rendered_prompts_only_when_asked(
    tmp_path: Path, log_prompts: bool
) -> None:
    config = RunConfig(
        problem="gemm-tiling",
        seed=5,
        max_proposals=6,
        max_in_flight=2,
        proposer={"log_prompts": log_prompts},
    )
    state, _counts, _controller = await run_job(tmp_path, LocalQueue(), config)
    assert state.value == "done"
    with sqlite3.connect(tmp_path / "run.sqlite") as conn:
        rows = conn.execute(
            "select prompt, answer from proposals where proposal_index >= 0"
        ).fetchall()
    assert len(rows) == 6
    if log_prompts:
        assert all(prompt.startswith("# gemm-tiling\n") for prompt, _answer in rows)
        assert all("## How to answer" in prompt and answer for prompt, answer in rows)
    else:
        assert rows == [("", "")] * 6
