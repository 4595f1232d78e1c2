"""Benchmark: CPU of the controller's queue calls per task and result, against a real Redis.

Each round submits 32 tasks in one ``submit_many``, publishes 32 results as a worker would (one
pipeline), and reads them back with ``next_results``; the figure is this process's CPU time per
task and result, over all three. Prints which reply parser redis-py uses (hiredis when it is
installed, else its own Python one), so two environments can be compared.

    python bench/queue_cpu.py [--redis redis://127.0.0.1:6379/0] [--rounds 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

from redis.asyncio import Redis
from redis.utils import HIREDIS_AVAILABLE

from codevolve.core.codec import evaluation_to_dict
from codevolve.core.config import RunConfig
from codevolve.core.program import Evaluation, ProgramStatus, StageResult
from codevolve.core.task import Task
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.evaluator_workers.redis_queue import RedisTaskQueue

BATCH = 32  # tasks and results per round


async def main(redis_url: str, rounds: int) -> None:
    redis = Redis.from_url(redis_url, decode_responses=True)
    keys = RedisKeys(f"bench-{uuid.uuid4().hex[:8]}")
    queue = RedisTaskQueue(redis, "bench", keys=keys)
    limits = RunConfig(problem="bench").sandbox
    tasks = [
        Task(
            program_id=uuid.uuid4().hex,
            job_id="bench",
            problem="bench",
            source="def f(x):\n    return x\n" * 12,
            seed=index,
            parent_scores={"score": 0.5},
            limits=limits,
        )
        for index in range(BATCH)
    ]
    results = [
        json.dumps(
            evaluation_to_dict(
                Evaluation(
                    program_id=task.program_id,
                    job_id="bench",
                    status=ProgramStatus.EVALUATED,
                    stages=(StageResult(stage="score", passed=True, score=0.5),),
                    worker="bench",
                )
            )
        )
        for task in tasks
    ]
    try:
        await queue.start()
        cpu = time.process_time()
        for _ in range(rounds):
            await queue.submit_many(tasks)
            async with redis.pipeline(transaction=False) as pipe:
                for payload in results:
                    pipe.xadd(keys.results("bench"), {"evaluation": payload})
                await pipe.execute()
            read = 0
            while read < BATCH:
                read += len(await queue.next_results(0.1, 256))
        per = (time.process_time() - cpu) / (rounds * BATCH) * 1e6
        parser = "hiredis" if HIREDIS_AVAILABLE else "redis-py's Python parser"
        print(f"queue calls: {per:.0f} µs CPU per task and result ({parser}; {rounds} rounds)")
    finally:
        names = [key async for key in redis.scan_iter(match=f"{keys.prefix}:*")]
        if names:
            await redis.delete(*names)
        await redis.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--rounds", type=int, default=100)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.redis, arguments.rounds))
