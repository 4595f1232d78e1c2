"""``/api/v1/health``: is the server up, and are the database and Redis reachable.

A load balancer polls it, often while the server is busiest, so it never queues behind the API's
pool: the probe has an engine of its own (one connection, :data:`~.pools.HEALTH_POOL`) and its own
Redis client, each check is bounded by :data:`CHECK_TIMEOUT_S`, and concurrent requests share
one probe (its answer is reused for :data:`REUSE_S`).

The answer: ``status`` ``ok`` when every dependency answers, ``degraded`` otherwise, with a
line per dependency. HTTP 200 while the database answers (the API can serve; with Redis down jobs
make no progress, and the body says so), 503 when it does not.
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from pydantic import BaseModel, Field
from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from codevolve.program_db.engine import create_engine
from codevolve.services.runtime.pools import HEALTH_POOL

CHECK_TIMEOUT_S = 2.0  # seconds a dependency has to answer before it counts as down
REUSE_S = 1.0  # seconds an answer serves further requests

DependencyStatus = Literal["ok", "down", "not configured"]


class Dependency(BaseModel):
    status: DependencyStatus
    detail: str = Field(description="what the check found, e.g. 'answered in 0.4 ms'")


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    database: DependencyStatus
    redis: DependencyStatus
    dependencies: dict[str, Dependency]
    version: str
    problems: list[str]


class HealthProbe:
    """The checks behind ``/health``, on connections of their own. :meth:`close` releases them."""

    def __init__(self, database_url: str, redis_url: str | None) -> None:
        self._engine: AsyncEngine = create_engine(database_url, read_only=True, pool=HEALTH_POOL)
        self._redis = (
            None
            if redis_url is None
            else Redis.from_url(
                redis_url, socket_connect_timeout=CHECK_TIMEOUT_S, socket_timeout=CHECK_TIMEOUT_S
            )
        )
        self._lock = asyncio.Lock()
        self._last: tuple[float, dict[str, Dependency]] | None = None  # (monotonic s, checks)

    async def check(self) -> dict[str, Dependency]:
        """Each dependency's state; one probe at a time, reused for ``REUSE_S``."""
        async with self._lock:
            if self._last is not None and time.monotonic() - self._last[0] < REUSE_S:
                return self._last[1]
            database, redis = await asyncio.gather(self._database(), self._redis_state())
            checks = {"database": database, "redis": redis}
            self._last = (time.monotonic(), checks)
            return checks

    async def _database(self) -> Dependency:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S), self._engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
        except TimeoutError:
            return Dependency(status="down", detail=f"no answer in {CHECK_TIMEOUT_S:g} s")
        except (OSError, SQLAlchemyError) as error:
            return Dependency(status="down", detail=_reason(error))
        return Dependency(status="ok", detail=_answered(started))

    async def _redis_state(self) -> Dependency:
        if self._redis is None:
            return Dependency(status="not configured", detail="embedded mode: no Redis")
        started = time.perf_counter()
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                await self._redis.ping()
        except TimeoutError:
            return Dependency(status="down", detail=f"no answer in {CHECK_TIMEOUT_S:g} s")
        except (OSError, RedisError) as error:
            return Dependency(status="down", detail=_reason(error))
        return Dependency(status="ok", detail=_answered(started))

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
        await self._engine.dispose()


def _answered(started: float) -> str:
    return f"answered in {(time.perf_counter() - started) * 1000:.1f} ms"


def _reason(error: BaseException) -> str:
    """The innermost driver message, first line, behind the error's type."""
    inner = getattr(error, "orig", None)
    cause = inner if isinstance(inner, BaseException) else error
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0]}" if lines else type(cause).__name__
