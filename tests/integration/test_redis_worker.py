"""A Redis worker process's life: it announces itself, evaluates, and on stop (what SIGTERM sets)
finishes the evaluation in hand, publishes it and signs off."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from redis.asyncio import Redis

from codevolve.core.problem import Baseline, Candidate, FeatureSpec, Mutation, Stage, Threshold
from codevolve.core.program import ProgramStatus, StageResult
from codevolve.core.task import Task
from codevolve.evaluator_workers.heartbeat import list_workers
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.evaluator_workers.redis_queue import QueueTuning, RedisTaskQueue
from codevolve.services.runtime.workers import WorkerOptions, serve_worker

EVALUATION_S = 1.0  # seconds each evaluation of the slow problem takes


@dataclass(frozen=True, slots=True)
class _SlowStage:
    name: str = "slow"
    threshold: Threshold | None = None

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        time.sleep(EVALUATION_S)
        return StageResult(stage=self.name, passed=True, score=float(len(candidate.source)))


@dataclass(frozen=True, slots=True)
class _SlowProblem:
    name: str = "slow"
    description: str = ""
    initial_program: str = "x = 1\n"

    @property
    def stages(self) -> Sequence[Stage]:
        return (_SlowStage(),)

    @property
    def features(self) -> Sequence[FeatureSpec]:
        return ()

    def mutations(self) -> Sequence[Mutation]:
        return ()

    def baselines(self) -> Sequence[Baseline]:
        return ()


async def test_a_stopped_worker_finishes_its_evaluation_and_leaves_the_fleet(
    redis: Redis, redis_url: str, keys: RedisKeys
) -> None:
    queue = RedisTaskQueue(redis, "job", keys=keys)
    await queue.start()
    stop = asyncio.Event()
    options = WorkerOptions(key_prefix=keys.prefix, tuning=QueueTuning(lease_s=5), heartbeat_s=0.2)
    worker = asyncio.create_task(
        serve_worker(
            redis_url,
            capability="cpu",
            concurrency=1,
            name="drain",
            options=options,
            resolve_problem=lambda _name: _SlowProblem(),
            stop=stop,
        )
    )
    await queue.submit(Task(program_id="p", job_id="job", problem="slow", source="abc", seed=0))
    for _ in range(600):  # up to 30 s for the worker to start and claim
        if [w for w in await list_workers(redis, keys) if w["busy"] == 1]:
            break
        await asyncio.sleep(0.05)
    fleet = await list_workers(redis, keys)
    assert [(w["name"], w["capability"], w["concurrency"]) for w in fleet] == [("drain", "cpu", 1)]
    assert fleet[0]["cpus"] >= 1 and "python" in fleet[0]["backends"]
    stop.set()  # mid-evaluation
    async with asyncio.timeout(30):
        await worker
    result = await queue.next_result(1.0)
    assert result is not None and result.status is ProgramStatus.EVALUATED and result.score == 3.0
    assert await list_workers(redis, keys) == []
    assert await redis.xlen(keys.tasks("cpu")) == 0  # acknowledged: nothing left to reclaim
