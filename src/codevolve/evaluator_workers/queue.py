"""The two sides of the task queue, shared by the embedded queue and the Redis one.

Delivery is at least once: a task whose worker dies may be handed out again, so an evaluation may
arrive twice; the controller applies it once (a guarded ``pending -> evaluated`` transition).
"""

from __future__ import annotations

from typing import Protocol

from codevolve.core.program import Evaluation
from codevolve.core.task import Task


class TaskQueue(Protocol):
    """The controller's side: hands tasks out, takes evaluations in."""

    async def submit(self, task: Task) -> None:
        """Queue a task for some worker."""
        ...

    async def next_result(self, timeout_s: float) -> Evaluation | None:
        """The next evaluation, or None when none came within ``timeout_s`` seconds."""
        ...


class WorkSource(Protocol):
    """A worker's side: claims a task, completes it with its evaluation."""

    async def claim(self, timeout_s: float) -> Task | None:
        """The next task for this worker, or None when none came within ``timeout_s`` seconds."""
        ...

    async def complete(self, task: Task, evaluation: Evaluation) -> None:
        """Publish the task's evaluation; the task is then done (acknowledged)."""
        ...
