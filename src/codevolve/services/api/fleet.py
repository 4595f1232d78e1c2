"""The worker fleet as the API and the dashboard show it, read from the workers' Redis heartbeats.

One reader for every front end: ``codevolve serve --redis`` passes :func:`redis_fleet` to the app.
A heartbeat (:func:`codevolve.evaluator_workers.heartbeat.beat`) is a hash whose ``info`` field
holds the worker's :class:`~codevolve.evaluator_workers.heartbeat.WorkerInfo` as JSON, beside
``busy`` and ``seen``; :func:`~codevolve.evaluator_workers.heartbeat.list_workers` answers each as
one flat record, the ``WorkerInfo`` fields with ``busy`` and ``seen`` beside them.

While Redis does not answer, the reader raises :class:`FleetUnreachable` naming the server (host,
port and database, never the URL's password) and why, so that the API answers a 503 and the
dashboard a banner instead of an empty fleet or a 500.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from codevolve.core.errors import CodevolveError
from codevolve.evaluator_workers.heartbeat import list_workers
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.evaluator_workers.redis_queue import UNREACHABLE
from codevolve.services.api.deps import FleetReader, WorkerStatus

READ_TIMEOUT_S = 2.0  # seconds; a Redis that answers slower than this counts as unreachable


class FleetUnreachable(CodevolveError):
    """The workers' heartbeats could not be read; the message (one sentence, shown to users as
    it is) says where and why."""


def worker_status(record: Mapping[str, Any]) -> WorkerStatus:
    """One record of ``list_workers``: the ``WorkerInfo`` fields plus ``busy`` and ``seen`` (unix
    seconds). Capabilities are the task stream the worker claims from, then its backends."""
    seen = record.get("seen")
    capabilities = (str(record.get("capability", "")), *map(str, record.get("backends", ())))
    gpu_model = record.get("gpu_model")
    return WorkerStatus(
        name=str(record.get("name", "")),
        capabilities=tuple(c for c in capabilities if c),
        last_seen=None if not seen else datetime.fromtimestamp(float(seen), UTC),
        busy=int(record.get("busy", 0)),
        concurrency=int(record.get("concurrency", 0)),
        host=str(record.get("host", "")),
        gpu_model=None if gpu_model is None else str(gpu_model),
    )


def redis_address(redis: Redis) -> str:
    """Where ``redis`` connects, as ``host:port/db`` (or the socket path): no credentials."""
    options = redis.connection_pool.connection_kwargs
    if "path" in options:
        return str(options["path"])
    return f"{options.get('host', 'localhost')}:{options.get('port', 6379)}/{options.get('db', 0)}"


def redis_fleet(redis: Redis, keys: RedisKeys) -> FleetReader:
    """``create_app(..., fleet=redis_fleet(redis, keys))`` in distributed mode."""
    where = f"the worker fleet is unreachable: Redis at {redis_address(redis)}"

    async def read() -> Sequence[WorkerStatus]:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                records = await list_workers(redis, keys)
        except UNREACHABLE as exc:
            raise FleetUnreachable(f"{where} ({type(exc).__name__}: {exc})") from exc
        except TimeoutError as exc:
            raise FleetUnreachable(f"{where} (no answer in {READ_TIMEOUT_S:g} s)") from exc
        return [worker_status(record) for record in records]

    return read
