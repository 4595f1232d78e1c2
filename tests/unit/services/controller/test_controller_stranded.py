"""A child inserted but never queued (its proposal broke in between) is still evaluated."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from codevolve.core.config import RunConfig
from codevolve.core.task import Task
from codevolve.evaluator_workers.local_queue import LocalQueue
from tests.unit.services.controller.controller_support import run_job


class FlakyQueue(LocalQueue):
    """Loses the connection once: the third submission (one task or a batch) raises."""

    def __init__(self) -> None:
        super().__init__()
        self.submitted = 0

    async def submit(self, task: Task) -> None:
        self.submitted += 1
        if self.submitted == 3:
            raise ConnectionResetError("the queue went away")
        await super().submit(task)

    async def submit_many(self, tasks: Sequence[Task]) -> None:
        self.submitted += 1
        if self.submitted == 3:
            raise ConnectionResetError("the queue went away")
        await super().submit_many(tasks)


async def test_a_child_whose_task_was_lost_is_sent_before_the_run_ends(tmp_path: Path) -> None:
    config = RunConfig(problem="gemm-tiling", seed=3, max_proposals=10, max_in_flight=2)
    queue = FlakyQueue()
    state, counts, _controller = await run_job(tmp_path, queue, config)
    assert state.value == "done"
    assert queue.submitted >= 4  # the lost task was sent again
    assert counts.pending == 0
