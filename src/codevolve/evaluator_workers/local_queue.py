"""The embedded queue: controller and workers share one process and two asyncio queues."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TypeVar

from codevolve.core.program import Evaluation
from codevolve.core.task import Task

Item = TypeVar("Item")


class LocalQueue:
    """Both sides of the queue (:class:`~.queue.TaskQueue` and :class:`~.queue.WorkSource`).

    Nothing survives the process; a resumed job re-enqueues its pending programs.
    """

    def __init__(self) -> None:
        self._tasks: asyncio.Queue[Task] = asyncio.Queue()
        self._results: asyncio.Queue[Evaluation] = asyncio.Queue()

    async def submit(self, task: Task) -> None:
        self._tasks.put_nowait(task)

    async def submit_many(self, tasks: Sequence[Task]) -> None:
        for task in tasks:
            self._tasks.put_nowait(task)

    async def next_result(self, timeout_s: float) -> Evaluation | None:
        return await _get(self._results, timeout_s)

    async def next_results(self, timeout_s: float, limit: int) -> list[Evaluation]:
        first = await _get(self._results, timeout_s)
        if first is None:
            return []
        results = [first]
        while len(results) < limit and not self._results.empty():
            results.append(self._results.get_nowait())
        return results

    @property
    def claimed(self) -> int:
        return 0  # nothing is read ahead: a claim takes straight from the queue

    async def claim(self, timeout_s: float) -> Task | None:
        return await _get(self._tasks, timeout_s)

    async def complete(self, task: Task, evaluation: Evaluation) -> None:
        self._results.put_nowait(evaluation)

    def pending_tasks(self) -> int:
        """Tasks submitted and not yet claimed."""
        return self._tasks.qsize()


async def _get(queue: asyncio.Queue[Item], timeout_s: float) -> Item | None:
    try:
        async with asyncio.timeout(timeout_s):
            return await queue.get()
    except TimeoutError:
        return None
