"""The two sides of the task queue, shared by the embedded queue and the Redis one.

Delivery is at least once: a task whose worker dies may be handed out again, so an evaluation may
arrive twice; the controller applies it once (a guarded ``pending -> evaluated`` transition).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from codevolve.core.program import Evaluation
from codevolve.core.task import Task


class TaskQueue(Protocol):
    """The controller's side: hands tasks out, takes evaluations in."""

    async def submit(self, task: Task) -> None:
        """Queue a task for some worker."""
        ...

    async def submit_many(self, tasks: Sequence[Task]) -> None:
        """Queue several tasks at once (one round trip where the queue has a server)."""
        ...

    async def next_results(self, timeout_s: float, limit: int) -> list[Evaluation]:
        """Up to ``limit`` evaluations, waiting at most ``timeout_s`` seconds for the first;
        empty when none came. Asking again acknowledges the ones handed out before."""
        ...


class WorkSource(Protocol):
    """A worker's side: claims a task, completes it with its evaluation."""

    @property
    def claimed(self) -> int:
        """Tasks this worker has read ahead for its loops and not handed out yet."""
        ...

    async def claim(self, timeout_s: float) -> Task | None:
        """The next task for this worker, or None when none came within ``timeout_s`` seconds."""
        ...

    async def complete(self, task: Task, evaluation: Evaluation) -> None:
        """Publish the task's evaluation; the task is then done (acknowledged)."""
        ...
