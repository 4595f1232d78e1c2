"""The controller's side of the launch store (docs/launch-store.md): the stored timings a
program's GPU stages may use travel with its task; the judge's fresh timings are written as its
result is applied.

A problem takes part by having ``launch_keys(source) -> Sequence[LaunchKey] | None``: the launches
its program takes, read from the source (gemm-kernel-gpu). Re-measures never carry stored timings:
a would-be best is timed afresh before it is the job's best.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from codevolve.core.device import CPU
from codevolve.core.launch_store import LaunchKey
from codevolve.core.program import Evaluation
from codevolve.core.task import Task
from codevolve.program_db.job_store import JobStore, JobTransaction

KeysOf = Callable[[str], Sequence[LaunchKey] | None]


def keys_of(problem: object) -> KeysOf | None:
    """The problem's ``launch_keys``, if it has one."""
    found = getattr(problem, "launch_keys", None)
    return found if callable(found) else None


async def with_stored_timings(task: Task, store: JobStore, keys: KeysOf | None) -> Task:
    """The task, carrying the store's timings for its program's launches when it goes to a
    device (none for a re-measure, or a program whose launches cannot be read)."""
    if keys is None or task.capability == CPU or task.remeasure:
        return task
    wanted = keys(task.source)
    if not wanted:
        return task
    async with store.reading() as unit:
        stored = await unit.stored_timings(wanted)
    return dataclasses.replace(task, stored_timings=tuple(stored))


async def record_fresh_timings(unit: JobTransaction, evaluations: Sequence[Evaluation]) -> None:
    """Write the judge's fresh timings of these evaluations, with the ids of who measured them."""
    fresh = [
        dataclasses.replace(timing, job_id=evaluation.job_id, program_id=evaluation.program_id)
        for evaluation in evaluations
        for stage in evaluation.stages
        for timing in stage.launch_timings
    ]
    if fresh:
        await unit.record_timings(fresh)


def from_store(evaluation: Evaluation) -> bool:
    """Whether every device stage of the evaluation was scored from the store alone."""
    shares = [s.artifacts["from_store"] for s in evaluation.stages if "from_store" in s.artifacts]
    return bool(shares) and all(
        done == total for done, total in (share.split("/") for share in shares)
    )
