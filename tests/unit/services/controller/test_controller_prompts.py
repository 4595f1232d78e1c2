"""The simulated proposer never reads a prompt's text: it is rendered only when prompts are
stored, and then stored with every proposal, the problem's notes included."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from codevolve.core.config import RunConfig
from codevolve.core.prompt import ProgramView
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.problems.gemm_tiling.problem import gemm_tiling_problem
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


async def test_the_problems_notes_on_the_parent_and_inspirations_are_in_the_prompt(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str, int]] = []

    def notes(parent: ProgramView, inspirations: Sequence[ProgramView]) -> str:
        seen.append((parent.id, len(inspirations)))
        return f"## Notes\n\nparent scored {parent.score:.3f} over {len(parent.cases)} cases"

    problem = dataclasses.replace(gemm_tiling_problem(), notes=notes)
    config = RunConfig(
        problem="gemm-tiling", seed=5, max_proposals=4, proposer={"log_prompts": True}
    )
    state, _counts, _controller = await run_job(tmp_path, LocalQueue(), config, problem=problem)
    assert state.value == "done" and len(seen) == 4
    with sqlite3.connect(tmp_path / "run.sqlite") as conn:
        prompts = [row[0] for row in conn.execute("select prompt from proposals")]
    assert len(prompts) == 4
    for prompt in prompts:
        assert "## Notes\n\nparent scored " in prompt
        assert prompt.index("## Notes") < prompt.index("## How to answer")
