"""A result delivered twice in one batch (a task resent after Redis lost its data, whose first
delivery was still published) is applied once and frees its proposal slot once."""

from __future__ import annotations

from pathlib import Path

from codevolve.core.config import RunConfig
from codevolve.core.program import Evaluation
from codevolve.core.task import Task
from codevolve.evaluator_workers.local_queue import LocalQueue
from tests.unit.services.controller.controller_support import run_job


class TwiceQueue(LocalQueue):
    """Every result arrives twice, back to back: both land in the controller's next batch."""

    async def complete(self, task: Task, evaluation: Evaluation) -> None:
        await super().complete(task, evaluation)
        await super().complete(task, evaluation)


async def test_a_result_twice_in_one_batch_is_applied_once_and_the_run_ends(
    tmp_path: Path,
) -> None:
    config = RunConfig(problem="gemm-tiling", seed=5, max_proposals=12, max_in_flight=3)
    state, counts, controller = await run_job(tmp_path, TwiceQueue(), config)
    assert state.value == "done"
    assert counts.pending == 0
    done = controller.progress.evaluated + controller.progress.rejected
    assert done + controller.progress.failed == counts.evaluated + counts.rejected + counts.failed
