"""The embedded queue and the worker loop, with a one-stage fake problem and a real sandbox."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from codevolve.core.config import SandboxLimits
from codevolve.core.errors import UnknownProblemError
from codevolve.core.problem import (
    Baseline,
    Candidate,
    FeatureSpec,
    Mutation,
    Problem,
    Stage,
    Threshold,
)
from codevolve.core.program import Evaluation, ProgramStatus, StageResult
from codevolve.core.task import Task
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import run_worker

LIMITS = SandboxLimits(wall_s=5.0, cpu_s=5.0, memory_mb=256, output_bytes=4096)


@dataclass(frozen=True)
class EchoStage:
    name: str = "echo"
    threshold: Threshold | None = None

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        reply = candidate.call("score", [[]])
        if not reply.ok or reply.values is None or not isinstance(reply.values[0], int | float):
            return StageResult(stage=self.name, passed=False, score=None, error=reply.error)
        return StageResult(stage=self.name, passed=True, score=float(reply.values[0]))


@dataclass(frozen=True)
class EchoProblem:
    name: str = "echo"
    description: str = "return a number"
    initial_program: str = "def score():\n    return 1\n"
    stages: Sequence[Stage] = (EchoStage(),)
    features: Sequence[FeatureSpec] = ()

    def mutations(self) -> Sequence[Mutation]:
        return ()

    def baselines(self) -> Sequence[Baseline]:
        return ()


def resolve(name: str) -> Problem:
    if name != "echo":
        raise UnknownProblemError(f"unknown problem {name!r}; known: echo")
    return EchoProblem()


def _task(index: int, *, source: str | None = None, problem: str = "echo") -> Task:
    return Task(
        program_id=f"program-{index}",
        job_id="job-1",
        problem=problem,
        source=source or f"def score():\n    return {index}\n",
        seed=index,
        limits=LIMITS,
    )


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(size=2) as started:
        yield started


async def _wait_until(condition: Callable[[], bool], *, within_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("the condition did not come true")
        await asyncio.sleep(0.01)


# ----------------------------------------------------------------------------- the queue


async def test_claim_and_next_result_give_none_after_their_timeout() -> None:
    queue = LocalQueue()
    assert await queue.claim(0.01) is None
    assert await queue.next_result(0.01) is None


async def test_tasks_are_claimed_in_submission_order_and_counted_until_claimed() -> None:
    queue = LocalQueue()
    for index in range(3):
        await queue.submit(_task(index))
    assert queue.pending_tasks() == 3
    claimed = [await queue.claim(0.1) for _ in range(3)]
    assert [t.program_id for t in claimed if t is not None] == [f"program-{i}" for i in range(3)]
    assert queue.pending_tasks() == 0
    evaluation = Evaluation(
        program_id="program-0", job_id="job-1", status=ProgramStatus.FAILED, stages=()
    )
    assert claimed[0] is not None
    await queue.complete(claimed[0], evaluation)
    assert await queue.next_result(0.1) == evaluation


# ----------------------------------------------------------------------------- the worker


async def test_twenty_tasks_are_evaluated_then_the_worker_stops_when_asked(
    pool: SandboxPool,
) -> None:
    queue = LocalQueue()
    stop = asyncio.Event()
    worker = asyncio.create_task(
        run_worker(queue, resolve_problem=resolve, pool=pool, concurrency=2, name="w", stop=stop)
    )
    for index in range(20):
        await queue.submit(_task(index))
    results: list[Evaluation] = []
    async with asyncio.timeout(30):
        while len(results) < 20:
            if (evaluation := await queue.next_result(1.0)) is not None:
                results.append(evaluation)
    stop.set()
    async with asyncio.timeout(5):
        await worker
    assert sorted(r.program_id for r in results) == sorted(f"program-{i}" for i in range(20))
    assert all(r.status is ProgramStatus.EVALUATED for r in results)
    assert {r.program_id: r.score for r in results}["program-13"] == 13.0
    assert {r.worker for r in results} <= {"w-0", "w-1"}
    assert queue.pending_tasks() == 0


async def test_on_stop_the_task_in_hand_is_finished_and_no_new_one_is_taken(
    pool: SandboxPool,
) -> None:
    queue = LocalQueue()
    stop = asyncio.Event()
    slow = "import time\ndef score():\n    time.sleep(0.5)\n    return 5\n"
    await queue.submit(_task(1, source=slow))
    worker = asyncio.create_task(
        run_worker(queue, resolve_problem=resolve, pool=pool, concurrency=1, name="w", stop=stop)
    )
    await _wait_until(lambda: queue.pending_tasks() == 0)  # claimed, now running
    stop.set()
    await queue.submit(_task(2))
    async with asyncio.timeout(5):
        await worker
    finished = await queue.next_result(0.1)
    assert finished is not None
    assert (finished.program_id, finished.score) == ("program-1", 5.0)
    assert queue.pending_tasks() == 1
    assert await queue.next_result(0.1) is None


async def test_a_task_of_an_unknown_problem_fails_its_program(pool: SandboxPool) -> None:
    queue = LocalQueue()
    stop = asyncio.Event()
    await queue.submit(_task(1, problem="nope"))
    async with asyncio.TaskGroup() as group:
        group.create_task(
            run_worker(
                queue, resolve_problem=resolve, pool=pool, concurrency=1, name="w", stop=stop
            )
        )
        evaluation = await queue.next_result(5.0)
        stop.set()
    assert evaluation is not None
    assert evaluation.status is ProgramStatus.FAILED
    assert evaluation.error is not None and "unknown problem 'nope'" in evaluation.error


@pytest.mark.parametrize(
    "broken",
    [
        "codevolve.evaluator_workers.worker.run_cascade",
        "codevolve.evaluator_workers.cascade.check_program",
    ],
)
async def test_trusted_code_that_raises_fails_that_program_and_the_worker_serves_the_next(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    real = _resolve_attribute(broken)

    def raise_for_the_first(*args: object, **kwargs: object) -> object:
        if "first" in repr(args):
            raise SystemError("AST constructor recursion depth mismatch")
        return real(*args, **kwargs)

    monkeypatch.setattr(broken, raise_for_the_first)
    queue = LocalQueue()
    stop = asyncio.Event()
    await queue.submit(_task(1, source="def score():\n    return 1  # first\n"))
    await queue.submit(_task(2))
    async with asyncio.TaskGroup() as group:
        group.create_task(
            run_worker(
                queue, resolve_problem=resolve, pool=pool, concurrency=1, name="w", stop=stop
            )
        )
        first = await queue.next_result(5.0)
        second = await queue.next_result(5.0)
        stop.set()
    assert first is not None and first.status is ProgramStatus.FAILED
    assert first.error is not None and "SystemError" in first.error
    assert second is not None and (second.status, second.score) == (ProgramStatus.EVALUATED, 2.0)


def _resolve_attribute(dotted: str) -> Callable[..., object]:
    module, _, name = dotted.rpartition(".")
    found: Callable[..., object] = getattr(importlib.import_module(module), name)
    return found


async def test_cancelling_the_worker_cancels_it_rather_than_being_swallowed(
    pool: SandboxPool,
) -> None:
    queue = LocalQueue()
    worker = asyncio.create_task(
        run_worker(
            queue, resolve_problem=resolve, pool=pool, concurrency=2, name="w", stop=asyncio.Event()
        )
    )
    await asyncio.sleep(0.05)
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker
    assert worker.cancelled()
