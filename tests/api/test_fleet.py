"""The worker fleet read from real Redis heartbeats (a key prefix of the test's own)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from codevolve.evaluator_workers.heartbeat import WorkerInfo, beat
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.services.api.app import create_app
from codevolve.services.api.fleet import redis_fleet
from codevolve.services.settings import Settings
from tests.api.conftest import ADMIN_TOKEN, admin

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def redis() -> AsyncIterator[tuple[Redis, RedisKeys]]:
    client = Redis.from_url(REDIS_URL, decode_responses=True)
    keys = RedisKeys(f"test-fleet-{uuid.uuid4().hex[:10]}")
    try:
        await client.ping()
    except RedisConnectionError as error:
        await client.aclose()
        if os.environ.get("CI"):  # under CI a missing service fails the suite, never skips
            pytest.fail(f"Redis at {REDIS_URL} unreachable: {error}")
        pytest.skip(f"Redis unreachable: {error}")
    try:
        yield client, keys
    finally:
        stale = [key async for key in client.scan_iter(f"{keys.prefix}:*")]
        if stale:
            await client.delete(*stale)
        await client.aclose()


async def test_workers_that_beat_are_listed_with_their_capabilities(
    redis: tuple[Redis, RedisKeys], migrated_sqlite_url: str
) -> None:
    client, keys = redis
    info = WorkerInfo(
        name="gpu-box-1",
        capability="gpu",
        concurrency=4,
        cpus=16,
        backends=("python", "triton"),
        gpu_model="NVIDIA H200",
        host="box",
    )
    await beat(client, keys, info, busy=3, interval_s=5.0)
    settings = Settings(db=migrated_sqlite_url, admin_token=ADMIN_TOKEN)
    app = create_app(settings, fleet=redis_fleet(client, keys))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://test") as http,
    ):
        fleet = (await http.get("/api/v1/workers", headers=admin())).json()
        page = await http.get("/workers", headers=admin())
        metrics = await http.get("/metrics")
    assert fleet["mode"] == "distributed"
    (worker,) = fleet["workers"]
    assert worker["name"] == "gpu-box-1" and worker["busy"] == 3 and worker["concurrency"] == 4
    assert worker["capabilities"] == ["gpu", "python", "triton"]
    assert worker["gpu_model"] == "NVIDIA H200" and worker["last_seen"] is not None
    assert "gpu-box-1" in page.text and "NVIDIA H200" in page.text
    assert "codevolve_workers 1" in metrics.text
