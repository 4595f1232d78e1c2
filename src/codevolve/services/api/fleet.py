"""The worker fleet as the dashboard shows it, read from the workers' Redis heartbeats."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from codevolve.evaluator_workers.heartbeat import list_workers
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.services.api.deps import FleetReader, WorkerStatus


def worker_status(record: Mapping[str, Any]) -> WorkerStatus:
    """One heartbeat record (``WorkerInfo`` fields plus ``busy`` and ``seen``, unix seconds)."""
    seen = record.get("seen")
    capabilities = (str(record.get("capability", "")), *map(str, record.get("backends", ())))
    return WorkerStatus(
        name=str(record.get("name", "")),
        capabilities=tuple(c for c in capabilities if c),
        last_seen=None if not seen else datetime.fromtimestamp(float(seen), UTC),
        busy=int(record.get("busy", 0)),
        concurrency=int(record.get("concurrency", 0)),
        host=str(record.get("host", "")),
        gpu_model=record.get("gpu_model"),
    )


def redis_fleet(redis: Redis, keys: RedisKeys) -> FleetReader:
    """``create_app(..., fleet=redis_fleet(redis, keys))`` in distributed mode."""

    async def read() -> Sequence[WorkerStatus]:
        return [worker_status(record) for record in await list_workers(redis, keys)]

    return read
