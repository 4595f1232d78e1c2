"""The entry point of a distributed worker: claim tasks of one capability from Redis, evaluate them
in sandboxes, publish the evaluations; heartbeat; drain on SIGTERM.

A worker needs only the Redis URL: it never receives database credentials.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from redis.asyncio import Redis

from codevolve.core.device import Device
from codevolve.core.problem import Problem
from codevolve.evaluator_workers.heartbeat import describe_host, heartbeat_loop
from codevolve.evaluator_workers.redis_keys import DEFAULT_PREFIX, TASK_GROUP, RedisKeys
from codevolve.evaluator_workers.redis_queue import (
    QueueTuning,
    RedisWorkSource,
    ensure_group,
    retrying,
)
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import run_worker
from codevolve.services.runtime.problems import ProblemResolver

log = logging.getLogger(__name__)

HEARTBEAT_S = 5.0  # seconds between heartbeats (and lease renewals)


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How a worker process talks to the queue."""

    key_prefix: str = DEFAULT_PREFIX
    tuning: QueueTuning = field(default_factory=QueueTuning)
    heartbeat_s: float = HEARTBEAT_S  # must stay well under tuning.lease_s


def default_name(capability: str) -> str:
    """Unique per process: host, pid and a random suffix (a restarted pid is a new worker)."""
    return f"{socket.gethostname()}-{capability}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def run_worker_process(
    redis_url: str,
    capability: str = "cpu",
    concurrency: int = 1,
    name: str | None = None,
    *,
    options: WorkerOptions | None = None,
    resolve_problem: Callable[[str], Problem] | None = None,
    device: Device | None = None,
) -> int:
    """Run a worker until SIGTERM or SIGINT (it finishes the evaluations in hand); returns 0."""
    asyncio.run(
        serve_worker(
            redis_url,
            capability=capability,
            concurrency=concurrency,
            name=name or default_name(capability),
            options=options or WorkerOptions(),
            resolve_problem=resolve_problem,
            device=device,
        )
    )
    return 0


async def serve_worker(
    redis_url: str,
    *,
    capability: str,
    concurrency: int,
    name: str,
    options: WorkerOptions,
    resolve_problem: Callable[[str], Problem] | None = None,
    stop: asyncio.Event | None = None,
    device: Device | None = None,
) -> None:
    """The worker, as a coroutine (``stop`` replaces the signal handlers when given)."""
    stop = stop or _stop_on_signals()
    keys = RedisKeys(options.key_prefix)
    redis = Redis.from_url(redis_url, decode_responses=True)
    owned = ProblemResolver(redis_url, keys) if resolve_problem is None else None
    resolve: Callable[[str], Problem] = resolve_problem or owned  # type: ignore[assignment]
    try:
        source = RedisWorkSource(
            redis, capability=capability, consumer=name, keys=keys, tuning=options.tuning
        )
        stream = keys.tasks(capability)
        await retrying("group", lambda: ensure_group(redis, stream, TASK_GROUP))
        info = describe_host(name=name, capability=capability, concurrency=concurrency)
        beating = asyncio.Event()
        with SandboxPool(size=concurrency) as pool:
            log.info("worker %s: claiming %s tasks, %d at once", name, capability, concurrency)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(
                    heartbeat_loop(
                        redis, keys, info, source, interval_s=options.heartbeat_s, stop=beating
                    )
                )
                try:
                    await run_worker(
                        source,
                        resolve_problem=resolve,
                        pool=pool,
                        concurrency=concurrency,
                        name=name,
                        stop=stop,
                        device=device,  # a GPU worker's device (see cli_dist --gpus)
                    )
                finally:
                    beating.set()
        log.info("worker %s: drained", name)
    finally:
        if owned is not None:
            owned.close()
        await redis.aclose()


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    return stop
