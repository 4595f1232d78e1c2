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
import urllib.parse
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from codevolve.core.device import Device
from codevolve.core.errors import CodevolveError
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


class StoppedBeforeStart(CodevolveError):
    """SIGTERM or SIGINT came while the worker still waited for Redis to answer (none ever did):
    it stops at once instead of retrying on. ``signal_name`` says which signal."""

    def __init__(self, signal_name: str, redis_at: str) -> None:
        self.signal_name = signal_name
        super().__init__(
            f"interrupted ({signal_name}): the worker stopped before Redis at {redis_at} "
            "answered; check that Redis runs there and --redis is right"
        )


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
    """Run a worker until SIGTERM or SIGINT (it finishes the evaluations in hand); returns 0.
    Raises :class:`StoppedBeforeStart` when the signal came before Redis ever answered."""
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
    received: list[signal.Signals] = []  # the signals that set ``stop``
    stop = stop or _stop_on_signals(received)
    keys = RedisKeys(options.key_prefix)
    redis = Redis.from_url(redis_url, decode_responses=True)
    owned = ProblemResolver(redis_url, keys) if resolve_problem is None else None
    resolve: Callable[[str], Problem] = resolve_problem or owned  # type: ignore[assignment]
    try:
        source = RedisWorkSource(
            redis, capability=capability, consumer=name, keys=keys, tuning=options.tuning
        )
        stream = keys.tasks(capability)
        # Redis may be down: retried with backoff, but a signal ends the wait (Ctrl-C works).
        if not await _unless_stopped(
            retrying("group", lambda: ensure_group(redis, stream, TASK_GROUP)), stop
        ):
            name = received[0].name if received else "stop"
            raise StoppedBeforeStart(name, _address(redis_url))
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


def _stop_on_signals(received: list[signal.Signals]) -> asyncio.Event:
    """An event set by SIGTERM or SIGINT; each signal is appended to ``received``."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stopped_by(number: signal.Signals) -> None:
        received.append(number)
        stop.set()

    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stopped_by, number)
    return stop


async def _unless_stopped(call: Coroutine[Any, Any, object], stop: asyncio.Event) -> bool:
    """Await ``call`` unless ``stop`` is set first, which cancels it; whether it finished."""
    async with asyncio.TaskGroup() as tg:
        work = tg.create_task(call)
        watch = tg.create_task(stop.wait())
        await asyncio.wait((work, watch), return_when=asyncio.FIRST_COMPLETED)
        work.cancel()  # (no-op once done)
        watch.cancel()
    return not work.cancelled()


def _address(redis_url: str) -> str:
    """HOST:PORT of a Redis URL (never its password)."""
    parts = urllib.parse.urlsplit(redis_url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
