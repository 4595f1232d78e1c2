"""``/api/v1/health``: ok, degraded with Redis down (200), 503 with the database down, an answer at
once while every API connection is busy; a request that waits too long for one is a 503."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from codevolve.program_db.engine import PoolSize, create_engine, session_factory
from codevolve.services.api.app import create_app
from codevolve.services.settings import Settings
from tests.api.conftest import ADMIN_TOKEN, admin
from tests.integration.redis_support import REDIS_URL

FAST_S = 1.0  # seconds: the health check must answer well within this, whatever the API does


def _closed_port() -> int:
    """A port where nothing listens (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def _client(
    database_url: str, *, redis_url: str | None = None, pool: PoolSize | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """The app on ``database_url`` with its lifespan run, and a client speaking ASGI to it."""
    engine = create_engine(database_url, pool=pool)
    settings = Settings(db=database_url, redis_url=redis_url, admin_token=ADMIN_TOKEN)
    app = create_app(settings, sessions=session_factory(engine))
    transport = httpx.ASGITransport(app=app)
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        ):
            yield client, app
    finally:
        await engine.dispose()


async def test_health_is_ok_when_the_database_and_redis_answer(
    migrated_postgres_url: str,
) -> None:
    async with _client(migrated_postgres_url, redis_url=REDIS_URL) as (client, _app):
        response = await client.get("/api/v1/health")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["database"], body["redis"]) == ("ok", "ok", "ok")
    assert body["dependencies"]["database"]["detail"].startswith("answered in")


async def test_health_without_redis_configured_is_ok_and_says_so(
    migrated_postgres_url: str,
) -> None:
    async with _client(migrated_postgres_url) as (client, _app):
        body = (await client.get("/api/v1/health")).json()
    assert (body["status"], body["redis"]) == ("ok", "not configured")


async def test_health_is_degraded_but_200_while_redis_is_down(
    migrated_postgres_url: str,
) -> None:
    port = _closed_port()
    redis_url = f"redis://127.0.0.1:{port}/0"
    async with _client(migrated_postgres_url, redis_url=redis_url) as (client, _app):
        started = time.monotonic()
        response = await client.get("/api/v1/health")
        took = time.monotonic() - started
    assert response.status_code == 200  # the API serves; the body says what is wrong
    body = response.json()
    assert (body["status"], body["database"], body["redis"]) == ("degraded", "ok", "down")
    assert f"127.0.0.1:{port}" in body["dependencies"]["redis"]["detail"]
    assert took < FAST_S


async def test_health_is_503_and_degraded_when_the_database_does_not_answer() -> None:
    nowhere = f"postgresql://postgres@127.0.0.1:{_closed_port()}/nothing"
    async with _client(nowhere) as (client, _app):
        response = await client.get("/api/v1/health")
    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["database"]) == ("degraded", "down")
    assert body["dependencies"]["database"]["detail"]


async def test_health_answers_at_once_while_every_api_connection_is_busy(
    migrated_postgres_url: str,
) -> None:
    pool = PoolSize(size=1, overflow=0, timeout_s=5.0)
    async with _client(migrated_postgres_url, pool=pool) as (client, app):
        sessions = app.state.codevolve.sessions
        async with sessions() as held:  # the API's one connection, taken
            await held.connection()
            started = time.monotonic()
            response = await client.get("/api/v1/health")
            took = time.monotonic() - started
    assert response.status_code == 200 and response.json()["status"] == "ok"
    assert took < FAST_S


async def test_a_request_that_finds_no_free_connection_in_time_is_a_503_to_retry(
    migrated_postgres_url: str,
) -> None:
    pool = PoolSize(size=1, overflow=0, timeout_s=0.2)
    async with _client(migrated_postgres_url, pool=pool) as (client, app):
        made = await client.post("/api/v1/tokens", json={"owner": "alice"}, headers=admin())
        headers = {"Authorization": f"Bearer {made.json()['token']}"}
        async with app.state.codevolve.sessions() as held:
            await held.connection()
            response = await client.get("/api/v1/jobs", headers=headers)
        after = await client.get("/api/v1/jobs", headers=headers)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json()["detail"].startswith("the database is busy")
    assert after.status_code == 200
