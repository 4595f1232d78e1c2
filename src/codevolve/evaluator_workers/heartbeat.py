"""Worker heartbeats: who is out there, with which capabilities, and their leases kept alive.

Each worker writes a hash under ``P:worker:<name>`` that expires after a few missed beats, and its
name into the ``P:workers`` set; :func:`list_workers` reads the fleet and forgets names whose hash
expired. Each beat also renews the lease of the tasks the worker holds.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from redis.asyncio import Redis

from codevolve.evaluator_workers.nvidia import query_gpus
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.evaluator_workers.redis_queue import UNREACHABLE, RedisWorkSource

log = logging.getLogger(__name__)

MISSED_BEATS = 3  # a worker silent for this many intervals is gone from the fleet


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What a worker announces about itself."""

    name: str
    capability: str  # the task stream it claims from: cpu or gpu
    concurrency: int  # evaluations at once
    cpus: int
    backends: tuple[str, ...] = ()  # evaluation backends importable here, e.g. ("python", "triton")
    gpu_model: str | None = None
    host: str = ""
    started_at: float = field(default_factory=time.time)  # unix seconds


def describe_host(*, name: str, capability: str, concurrency: int) -> WorkerInfo:
    """This machine's capabilities: CPU count, the first GPU's model, importable backends."""
    backends = ["python"] + [
        module for module in ("torch", "triton") if importlib.util.find_spec(module) is not None
    ]
    return WorkerInfo(
        name=name,
        capability=capability,
        concurrency=concurrency,
        cpus=os.cpu_count() or 1,
        backends=tuple(backends),
        gpu_model=_gpu_model(),
        host=os.uname().nodename,
    )


def _gpu_model() -> str | None:
    models = query_gpus("name")
    return models[0] if models else None


async def beat(
    redis: Redis, keys: RedisKeys, info: WorkerInfo, *, busy: int, interval_s: float
) -> None:
    """Write one heartbeat."""
    key = keys.worker(info.name)
    record = asdict(info) | {"backends": list(info.backends)}
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(key, mapping={"info": json.dumps(record), "busy": busy, "seen": time.time()})
        pipe.expire(key, max(1, int(interval_s * MISSED_BEATS + 0.999)))
        pipe.sadd(keys.workers(), info.name)
        await pipe.execute()


async def heartbeat_loop(
    redis: Redis,
    keys: RedisKeys,
    info: WorkerInfo,
    source: RedisWorkSource,
    *,
    interval_s: float,
    stop: asyncio.Event,
) -> None:
    """Beat and renew leases every ``interval_s`` until ``stop``; then leave the fleet."""
    while not stop.is_set():
        try:
            await beat(redis, keys, info, busy=source.in_hand, interval_s=interval_s)
            await source.renew_leases()
        except UNREACHABLE as exc:
            log.warning("worker %s: heartbeat failed (%s)", info.name, exc)
        try:
            async with asyncio.timeout(interval_s):
                await stop.wait()
        except TimeoutError:
            pass
    try:
        await redis.delete(keys.worker(info.name))
        await redis.srem(keys.workers(), info.name)
        await source.leave()
    except UNREACHABLE as exc:
        log.warning("worker %s: left without signing off (%s)", info.name, exc)


async def list_workers(redis: Redis, keys: RedisKeys) -> list[dict[str, Any]]:
    """The live fleet: each worker's announced info plus ``busy`` and ``seen`` (unix seconds)."""
    names = sorted(str(name) for name in await redis.smembers(keys.workers()))
    fleet: list[dict[str, Any]] = []
    gone: list[str] = []
    for name in names:
        record = await redis.hgetall(keys.worker(name))
        if not record:
            gone.append(name)
            continue
        fleet.append(
            json.loads(record["info"])
            | {"busy": int(record.get("busy", 0)), "seen": float(record.get("seen", 0.0))}
        )
    if gone:
        await redis.srem(keys.workers(), *gone)
    return fleet
