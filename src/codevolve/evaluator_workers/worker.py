"""The worker loop: claim a task, run its cascade in a thread, publish the evaluation.

The same code serves the embedded mode (a :class:`~.local_queue.LocalQueue`) and the distributed one
(Redis). Cascades run in a thread pool of the worker's own, one thread per loop, because a sandbox
call blocks its thread for up to the task's wall limit.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from codevolve.core.device import CPU, Device
from codevolve.core.errors import ConfigError
from codevolve.core.problem import Problem
from codevolve.core.program import Evaluation
from codevolve.core.task import Task, failed_evaluation
from codevolve.evaluator_workers.cascade import run_cascade
from codevolve.evaluator_workers.errors import SandboxUnavailable
from codevolve.evaluator_workers.queue import WorkSource
from codevolve.evaluator_workers.sandbox import SandboxPool

log = logging.getLogger(__name__)

CLAIM_POLL_S = 0.25  # seconds a claim waits, so that a stop is noticed this quickly


async def run_worker(
    source: WorkSource,
    *,
    resolve_problem: Callable[[str], Problem],
    pool: SandboxPool,
    concurrency: int,
    name: str,
    stop: asyncio.Event,
    device: Device | None = None,
) -> None:
    """Run ``concurrency`` claim-evaluate-complete loops until ``stop`` is set.

    With ``device`` the worker also serves stages needing the device's capability ("gpu"); the
    loops share it (the device runs one job at a time).

    On stop each loop finishes the task in hand and takes no new one. Cancellation is not caught:
    a cascade already running in a thread ends on its own, bounded by its sandbox limits.
    """
    if concurrency < 1:
        raise ValueError(f"a worker needs at least one loop, not {concurrency}")
    executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"{name}-cascade")
    try:
        async with asyncio.TaskGroup() as loops:
            for index in range(concurrency):
                evaluate = functools.partial(
                    _evaluate,
                    resolve_problem=resolve_problem,
                    pool=pool,
                    worker=f"{name}-{index}",
                    device=device,
                )
                loops.create_task(_loop(source, evaluate, executor=executor, stop=stop))
    finally:
        executor.shutdown(wait=False, cancel_futures=True)


async def _loop(
    source: WorkSource,
    evaluate: Callable[[Task], Evaluation],
    *,
    executor: ThreadPoolExecutor,
    stop: asyncio.Event,
) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set() or source.claimed:  # a draining worker runs what it already read
        task = await source.claim(CLAIM_POLL_S)
        if task is None:
            continue
        evaluation = await loop.run_in_executor(executor, evaluate, task)
        await source.complete(task, evaluation)
        log.debug("program %s: %s", task.program_id, evaluation.status.value)


def _evaluate(
    task: Task,
    *,
    resolve_problem: Callable[[str], Problem],
    pool: SandboxPool,
    worker: str,
    device: Device | None = None,
) -> Evaluation:
    served = {CPU} if device is None else {CPU, device.capability}
    if task.capability not in served:  # misrouted: a queue without capability routing
        error = f"worker {worker} lacks capability {task.capability!r} (serves {sorted(served)})"
        return failed_evaluation(task, error, worker=worker)
    try:
        problem = resolve_problem(task.problem)
    except ConfigError as exc:  # a problem this worker does not know fails its programs
        return failed_evaluation(task, f"worker {worker}: {exc}", worker=worker)
    try:
        return run_cascade(problem, task, pool, worker=worker, device=device)
    except SandboxUnavailable:
        raise  # no candidate can run on this worker: the task belongs to another
    except Exception as exc:  # the worker's task boundary: fail this program, serve the next
        log.exception("job %s program %s: the cascade raised", task.job_id, task.program_id)
        error = f"internal error in the evaluator: {type(exc).__name__}: {exc}"
        return failed_evaluation(task, error, worker=worker)
