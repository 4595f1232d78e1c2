"""What a request costs the database: a token is looked up once per few seconds, not per
request (and revocation still takes effect within that time), and routes that only read send no
BEGIN or COMMIT on Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from codevolve.core.config import RunConfig
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.services.api.app import create_app
from codevolve.services.api.token_cache import TokenCache
from codevolve.services.settings import Settings
from tests.api.conftest import ADMIN_TOKEN, admin
from tests.clock import ManualClock

TTL_S = 5.0
CONFIG = RunConfig(problem="gemm-tiling", max_proposals=10)


@dataclass
class Served:
    client: httpx.AsyncClient
    sessions: async_sessionmaker[AsyncSession]
    engine: AsyncEngine
    app: FastAPI
    clock: ManualClock


@pytest.fixture
async def served(migrated_postgres_url: str) -> AsyncIterator[Served]:
    engine = create_engine(migrated_postgres_url)
    sessions = session_factory(engine)
    settings = Settings(db=migrated_postgres_url, admin_token=ADMIN_TOKEN, public_dashboard=False)
    app = create_app(settings, sessions=sessions)
    clock = ManualClock()
    app.state.codevolve.tokens = TokenCache(ttl_s=TTL_S, clock=clock)
    transport = httpx.ASGITransport(app=app)
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        ):
            yield Served(client, sessions, engine, app, clock)
    finally:
        await engine.dispose()


async def _new_token(served: Served, owner: str) -> tuple[str, dict[str, str]]:
    """A token made as ``codevolve token create`` makes it (not through this API process)."""
    async with served.sessions.begin() as session:
        token, secret = await repository.create_token(session, owner=owner)
    return token.id, {"Authorization": f"Bearer {secret}"}


async def _revoke_elsewhere(served: Served, token_id: str) -> None:
    """Revoked as ``codevolve token revoke`` or another API process revokes it."""
    async with served.sessions.begin() as session:
        assert await repository.revoke_token(session, token_id)


def _statements(engine: AsyncEngine, seen: list[tuple[str, bool]]) -> None:
    """Record each statement the engine sends, with whether its connection was in autocommit."""

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _sent(connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        dbapi_connection = connection.connection.dbapi_connection
        seen.append((statement, bool(dbapi_connection.autocommit)))


async def test_a_burst_of_requests_with_one_token_looks_it_up_once(served: Served) -> None:
    _, alice = await _new_token(served, "alice")
    seen: list[tuple[str, bool]] = []
    _statements(served.engine, seen)
    answers = await asyncio.gather(
        *(served.client.get("/api/v1/jobs", headers=alice) for _ in range(20))
    )
    assert [answer.status_code for answer in answers] == [200] * 20
    assert len([statement for statement, _ in seen if "api_tokens" in statement]) == 1


async def test_a_token_revoked_elsewhere_is_refused_within_the_cache_time(served: Served) -> None:
    token_id, alice = await _new_token(served, "alice")
    assert (await served.client.get("/api/v1/jobs", headers=alice)).status_code == 200
    await _revoke_elsewhere(served, token_id)
    served.clock.now += TTL_S - 0.5  # still trusted: the burst is not sent to the database
    assert (await served.client.get("/api/v1/jobs", headers=alice)).status_code == 200
    served.clock.now += 0.5
    refused = await served.client.get("/api/v1/jobs", headers=alice)
    assert refused.status_code == 401
    assert refused.json()["detail"] == "invalid or revoked token"


async def test_unknown_and_revoked_tokens_are_refused_at_once_and_never_kept(
    served: Served,
) -> None:
    unknown = {"Authorization": "Bearer cv_not-a-token"}
    assert (await served.client.get("/api/v1/jobs", headers=unknown)).status_code == 401
    token_id, bob = await _new_token(served, "bob")
    await _revoke_elsewhere(served, token_id)
    assert (await served.client.get("/api/v1/jobs", headers=bob)).status_code == 401
    # a token created after a refusal works at once: refusals are not remembered
    _, carol = await _new_token(served, "carol")
    assert (await served.client.get("/api/v1/jobs", headers=carol)).status_code == 200


async def test_a_token_revoked_through_this_api_is_refused_at_once(served: Served) -> None:
    made = await served.client.post("/api/v1/tokens", json={"owner": "dave"}, headers=admin())
    dave = {"Authorization": f"Bearer {made.json()['token']}"}
    assert (await served.client.get("/api/v1/jobs", headers=dave)).status_code == 200
    revoked = await served.client.delete(f"/api/v1/tokens/{made.json()['id']}", headers=admin())
    assert revoked.status_code == 204
    assert (await served.client.get("/api/v1/jobs", headers=dave)).status_code == 401


async def test_read_routes_send_their_statements_without_a_transaction(served: Served) -> None:
    _, alice = await _new_token(served, "alice")
    async with served.sessions.begin() as session:
        job = await repository.create_job(session, CONFIG, owner="alice")
    seen: list[tuple[str, bool]] = []
    _statements(served.engine, seen)
    for path in ("/api/v1/jobs", f"/api/v1/jobs/{job.id}", f"/api/v1/jobs/{job.id}/programs"):
        assert (await served.client.get(path, headers=alice)).status_code == 200, path
    assert seen and all(autocommit for _, autocommit in seen), seen
    seen.clear()
    paused = await served.client.post(f"/api/v1/jobs/{job.id}/pause", headers=alice)
    assert paused.status_code == 200  # a change is one transaction, committed as before
    assert seen and not any(autocommit for statement, autocommit in seen if "jobs" in statement)
