"""The Redis Streams queue against the real Redis: routing, acknowledgement, reclaim, dead letters,
restart of the controller's reads, lost data, heartbeats and bundles."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis as redis_sync
from redis.asyncio import Redis

from codevolve.core.program import Evaluation, ProgramStatus, StageResult
from codevolve.core.task import Task
from codevolve.evaluator_workers.heartbeat import WorkerInfo, beat, list_workers
from codevolve.evaluator_workers.redis_bundles import fetch_bundle, publish_bundle
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.evaluator_workers.redis_queue import (
    QueueTuning,
    RedisTaskQueue,
    RedisWorkSource,
    task_capability,
)
from tests.integration.redis_support import PrivateRedis, delete_prefix

JOB = "job1"


def _task(program: str = "p1") -> Task:
    return Task(program_id=program, job_id=JOB, problem="gemm-tiling", source="x = 1", seed=3)


def _done(task: Task, score: float = 1.0) -> Evaluation:
    stage = StageResult(stage="s", passed=True, score=score)
    return Evaluation(
        program_id=task.program_id,
        job_id=task.job_id,
        status=ProgramStatus.EVALUATED,
        stages=(stage,),
        worker="w",
    )


def _source(redis: Redis, keys: RedisKeys, name: str, **tuning: float) -> RedisWorkSource:
    return RedisWorkSource(
        redis,
        capability="cpu",
        consumer=name,
        keys=keys,
        tuning=QueueTuning(**tuning),  # type: ignore[arg-type]
    )


async def test_a_task_travels_to_a_worker_and_its_result_back(
    redis: Redis, keys: RedisKeys
) -> None:
    queue = RedisTaskQueue(redis, JOB, keys=keys)
    await queue.start()
    worker = _source(redis, keys, "w1")
    await queue.submit(_task())
    assert await worker.claim(0.01) is None  # the group did not exist yet: created now
    task = await worker.claim(1.0)
    assert task is not None and task.program_id == "p1" and task.seed == 3
    assert await queue.next_result(0.05) is None
    await worker.complete(task, _done(task))
    result = await queue.next_result(1.0)
    assert result is not None and result.program_id == "p1" and result.score == 1.0
    assert await queue.next_result(0.05) is None
    assert await redis.xlen(keys.tasks("cpu")) == 0  # acknowledged tasks are deleted
    assert await redis.xlen(keys.results(JOB)) == 0  # applied results too


async def test_batches_travel_in_few_round_trips_and_each_task_once(
    redis: Redis, keys: RedisKeys
) -> None:
    queue = RedisTaskQueue(redis, JOB, keys=keys)
    await queue.start()
    worker = _source(redis, keys, "w1")
    assert await worker.claim(0.01) is None  # creates the group
    tasks = [_task(f"p{i}") for i in range(6)]
    await queue.submit_many(tasks)
    reads: list[int] = []
    xreadgroup = redis.xreadgroup

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs["count"])
        return await xreadgroup(*args, **kwargs)

    redis.xreadgroup = counted  # type: ignore[method-assign]
    claimed = await asyncio.gather(*(worker.claim(1.0) for _ in range(6)))
    redis.xreadgroup = xreadgroup  # type: ignore[method-assign]
    assert sorted(t.program_id for t in claimed if t) == [t.program_id for t in tasks]
    assert reads[0] == 6  # the first loop read for all six waiting loops
    assert worker.in_hand == 6 and worker.claimed == 0
    await asyncio.gather(*(worker.complete(t, _done(t)) for t in claimed if t))
    assert worker.in_hand == 0
    results = await queue.next_results(1.0, 4)
    results += await queue.next_results(1.0, 4)
    assert sorted(r.program_id for r in results) == [t.program_id for t in tasks]
    assert await queue.next_results(0.05, 4) == []
    assert await redis.xlen(keys.tasks("cpu")) == 0
    assert await redis.xlen(keys.results(JOB)) == 0


async def test_applied_results_are_acknowledged_in_the_read_that_finds_the_next_ones(
    redis: Redis, keys: RedisKeys
) -> None:
    queue = RedisTaskQueue(redis, JOB, keys=keys)
    await queue.start()
    worker = _source(redis, keys, "w1")
    assert await worker.claim(0.01) is None  # creates the group
    await queue.submit_many([_task("a"), _task("b")])
    first, second = await worker.claim(1.0), await worker.claim(1.0)
    assert first is not None and second is not None
    await worker.complete(first, _done(first))
    assert [r.program_id for r in await queue.next_results(1.0, 8)] == ["a"]
    await worker.complete(second, _done(second))
    blocking_reads: list[object] = []
    xreadgroup = redis.xreadgroup

    async def counted(*args: Any, **kwargs: Any) -> Any:
        blocking_reads.append(kwargs.get("block"))
        return await xreadgroup(*args, **kwargs)

    redis.xreadgroup = counted  # type: ignore[method-assign]
    try:
        assert [r.program_id for r in await queue.next_results(1.0, 8)] == ["b"]
    finally:
        redis.xreadgroup = xreadgroup  # type: ignore[method-assign]
    assert blocking_reads == []  # "a" was acknowledged in the same MULTI that read "b"
    pending = await redis.xpending(keys.results(JOB), "controller")
    assert pending["pending"] == 1  # only "b", not applied yet
    assert await redis.xlen(keys.results(JOB)) == 1  # "a" is deleted
    assert await queue.next_results(0.05, 8) == []
    assert await redis.xlen(keys.results(JOB)) == 0


async def test_a_read_ahead_task_is_kept_for_the_next_claim(redis: Redis, keys: RedisKeys) -> None:
    """A loop that gave up waiting leaves what was read for it to the next claim, never lost."""
    queue = RedisTaskQueue(redis, JOB, keys=keys)
    await queue.start()
    worker = _source(redis, keys, "w1")
    assert await worker.claim(0.01) is None
    slow = asyncio.create_task(worker.claim(1.0))  # reads for both loops; the stream is empty
    impatient = asyncio.create_task(worker.claim(0.05))  # gives up, queued behind the read
    await asyncio.sleep(0.15)
    await queue.submit_many([_task("a"), _task("b")])
    first, second = await slow, await impatient
    assert second is None and first is not None
    assert worker.claimed == 1  # read for the impatient loop, which had gone
    kept = await worker.claim(0.01)
    assert kept is not None and {first.program_id, kept.program_id} == {"a", "b"}


async def test_tasks_are_routed_by_capability(redis: Redis, keys: RedisKeys) -> None:
    queue = RedisTaskQueue(redis, JOB, keys=keys)
    await queue.start()
    gpu_task = Task(program_id="g", job_id=JOB, problem="p", source="", seed=0, capability="gpu")
    assert task_capability(gpu_task) == "gpu" and task_capability(_task()) == "cpu"
    await queue.submit(gpu_task)
    await queue.submit(_task("c"))
    assert await redis.xlen(keys.tasks("gpu")) == 1
    assert await redis.xlen(keys.tasks("cpu")) == 1


async def test_a_dead_workers_task_is_reclaimed_after_the_lease(
    redis: Redis, keys: RedisKeys
) -> None:
    queue = RedisTaskQueue(redis, JOB, keys=keys)
    await queue.start()
    await queue.submit(_task())
    dead = _source(redis, keys, "dead", lease_s=0.3)
    await dead.claim(0.01)
    assert await dead.claim(1.0) is not None  # ... and the worker dies holding it
    alive = _source(redis, keys, "alive", lease_s=0.3)
    assert await alive.claim(0.05) is None  # the lease has not run out
    await asyncio.sleep(0.35)
    task = await alive.claim(0.05)
    assert task is not None and task.program_id == "p1"
    await alive.complete(task, _done(task))
    assert (await queue.next_result(1.0)) is not None


async def test_renewed_leases_are_not_reclaimed(redis: Redis, keys: RedisKeys) -> None:
    queue = RedisTaskQueue(redis, JOB, keys=keys)
    await queue.start()
    await queue.submit(_task())
    busy = _source(redis, keys, "busy", lease_s=0.4)
    await busy.claim(0.01)
    assert await busy.claim(1.0) is not None
    other = _source(redis, keys, "other", lease_s=0.4)
    for _ in range(4):
        await asyncio.sleep(0.15)
        await busy.renew_leases()
        assert await other.claim(0.01) is None


async def test_a_task_delivered_too_often_is_dead_lettered_and_fails_its_program(
    redis: Redis, keys: RedisKeys
) -> None:
    queue = RedisTaskQueue(redis, JOB, keys=keys)
    await queue.start()
    await queue.submit(_task())
    first = _source(redis, keys, "first", lease_s=0.2, max_deliveries=2)
    await first.claim(0.01)
    assert await first.claim(1.0) is not None  # delivery 1, then lost
    await asyncio.sleep(0.25)
    second = _source(redis, keys, "second", lease_s=0.2, max_deliveries=2)
    assert await second.claim(0.05) is not None  # delivery 2, lost again
    await asyncio.sleep(0.25)
    third = _source(redis, keys, "third", lease_s=0.2, max_deliveries=2)
    assert await third.claim(0.05) is None  # delivery 3 would exceed 2: dead letter
    assert third.dead_lettered == 1
    result = await queue.next_result(1.0)
    assert result is not None and result.status is ProgramStatus.FAILED
    assert result.error is not None and "dead letter: delivered 2 times" in result.error
    dead = await redis.xrange(keys.dead_letters())
    assert len(dead) == 1 and "dead letter" in dead[0][1]["reason"]
    assert await redis.xlen(keys.tasks("cpu")) == 0


async def test_a_restarted_controller_reads_the_result_it_had_not_applied(
    redis: Redis, keys: RedisKeys
) -> None:
    queue = RedisTaskQueue(redis, JOB, keys=keys)
    await queue.start()
    worker = _source(redis, keys, "w")
    await queue.submit(_task())
    await worker.claim(0.01)
    task = await worker.claim(1.0)
    assert task is not None
    await worker.complete(task, _done(task))
    assert await queue.next_result(1.0) is not None  # read, then the controller dies
    again = RedisTaskQueue(redis, JOB, keys=keys)
    await again.start()
    result = await again.next_result(1.0)
    assert result is not None and result.program_id == "p1"
    assert await again.next_result(0.05) is None  # acknowledged now


async def test_renewing_leases_after_redis_lost_the_group_is_not_an_error(
    redis: Redis, keys: RedisKeys, redis_url: str
) -> None:
    queue = RedisTaskQueue(redis, JOB, keys=keys)
    await queue.start()
    await queue.submit(_task())
    worker = _source(redis, keys, "w")
    await worker.claim(0.01)
    task = await worker.claim(1.0)
    assert task is not None
    delete_prefix(redis_url, keys.prefix)  # the group goes with the stream
    await worker.renew_leases()  # raised NOGROUP and stopped the worker's heartbeat
    await worker.complete(task, _done(task))  # the result still stands


async def test_lost_redis_data_is_noticed_and_workers_carry_on(
    redis: Redis, keys: RedisKeys, redis_url: str
) -> None:
    queue = RedisTaskQueue(redis, JOB, keys=keys, tuning=QueueTuning(watch_s=0.0))
    await queue.start()
    worker = _source(redis, keys, "w")
    await worker.claim(0.01)
    assert await queue.next_result(0.01) is None and not queue.lost.is_set()
    delete_prefix(redis_url, keys.prefix)  # a flush, confined to this test's keys
    assert await queue.next_result(0.01) is None
    assert queue.lost.is_set() and queue.losses == 1
    await queue.submit(_task())  # what the owner does then: send the pending programs again
    assert await worker.claim(0.01) is None  # the worker finds its group gone: made again
    task = await worker.claim(1.0)
    assert task is not None and task.program_id == "p1"
    await worker.complete(task, _done(task))
    assert await queue.next_result(1.0) is not None


async def test_heartbeats_list_the_fleet_and_silent_workers_drop_out(
    redis: Redis, keys: RedisKeys
) -> None:
    info = WorkerInfo(name="w1", capability="gpu", concurrency=2, cpus=8, gpu_model="H100")
    await beat(redis, keys, info, busy=1, interval_s=0.4)  # expires after 3 beats: 1.2 s
    fleet = await list_workers(redis, keys)
    assert [(w["name"], w["capability"], w["gpu_model"], w["busy"]) for w in fleet] == [
        ("w1", "gpu", "H100", 1)
    ]
    await redis.delete(keys.worker("w1"))  # what expiry does to a worker that stopped beating
    assert await list_workers(redis, keys) == []
    assert await redis.scard(keys.workers()) == 0


async def test_bundles_are_published_for_workers_to_read(
    redis: Redis, keys: RedisKeys, redis_url: str
) -> None:
    files = {"initial_program.py": b"x = 1\n", "evaluator.py": b"\x00\xffbytes"}
    await publish_bundle(redis, keys, "abc", files)
    client = redis_sync.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert fetch_bundle(client, keys, "abc") == files
        assert fetch_bundle(client, keys, "missing") == {}
    finally:
        client.close()


@pytest.mark.slow
async def test_a_restarted_empty_redis_is_waited_out_on_both_sides(
    private_redis: PrivateRedis,
) -> None:
    keys = RedisKeys("restart")
    client = Redis.from_url(private_redis.url, decode_responses=True)
    try:
        queue = RedisTaskQueue(client, JOB, keys=keys, tuning=QueueTuning(watch_s=0.0))
        await queue.start()
        worker = _source(client, keys, "w")
        await worker.claim(0.01)
        private_redis.stop()
        assert await worker.claim(0.05) is None  # unreachable: waited out, no exception
        assert await queue.next_result(0.05) is None
        private_redis.start()
        assert await queue.next_result(0.05) is None
        assert queue.lost.is_set()
        await queue.submit(_task())
        claimed = None
        for _ in range(5):  # the first claim may find the group missing and create it
            claimed = claimed or await worker.claim(0.5)
        assert claimed is not None
        await worker.complete(claimed, _done(claimed))
        assert await queue.next_result(1.0) is not None
    finally:
        await client.aclose()
