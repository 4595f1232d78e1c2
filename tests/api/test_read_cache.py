"""The API process's read cache on a real Postgres: a read answered again within its time sends
no statement, a write through the API or the time running out makes the next read go to the
database, a burst of misses makes one read, callers see only what their token shows, and a cache
time of 0 reads every time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from codevolve.core.config import RunConfig
from codevolve.core.job import JobState
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.services.api.app import create_app
from codevolve.services.api.read_cache import ReadCache
from codevolve.services.settings import Settings
from tests.api.conftest import ADMIN_TOKEN, admin
from tests.clock import ManualClock

TTL_S = 1.0
CONFIG = RunConfig(problem="gemm-tiling", max_proposals=10)


@dataclass
class Served:
    client: httpx.AsyncClient
    sessions: async_sessionmaker[AsyncSession]
    clock: ManualClock
    statements: list[str]


async def _served(url: str, cache_s: float) -> AsyncIterator[Served]:
    engine = create_engine(url)
    sessions = session_factory(engine)
    settings = Settings(db=url, admin_token=ADMIN_TOKEN, api_read_cache_s=cache_s)
    app = create_app(settings, sessions=sessions)
    clock = ManualClock()
    app.state.codevolve.reads = ReadCache(ttl_s=cache_s, clock=clock)
    statements: list[str] = []
    _record(engine, statements)
    transport = httpx.ASGITransport(app=app)
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        ):
            yield Served(client, sessions, clock, statements)
    finally:
        await engine.dispose()


@pytest.fixture
async def served(migrated_postgres_url: str) -> AsyncIterator[Served]:
    async for one in _served(migrated_postgres_url, TTL_S):
        yield one


@pytest.fixture
async def uncached(migrated_postgres_url: str) -> AsyncIterator[Served]:
    async for one in _served(migrated_postgres_url, 0.0):
        yield one


def _record(engine: AsyncEngine, seen: list[str]) -> None:
    """Every statement the API's engine sends (the health probe has its own connections)."""

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _sent(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)


async def _job(served: Served, owner: str = "admin") -> str:
    async with served.sessions.begin() as session:
        job = await repository.create_job(session, CONFIG, owner=owner)
    return job.id


async def _reads(served: Served, path: str, headers: dict[str, str]) -> int:
    """Statements sent to answer one GET of ``path``, which must answer 200."""
    before = len(served.statements)
    answer = await served.client.get(path, headers=headers)
    assert answer.status_code == 200, answer.text
    return len(served.statements) - before


def _paths(job_id: str) -> list[str]:
    return [
        "/api/v1/jobs",
        f"/api/v1/jobs/{job_id}",
        f"/api/v1/jobs/{job_id}/programs",
        f"/api/v1/jobs/{job_id}/programs?sort=index&limit=5",
    ]


async def test_a_second_read_within_the_cache_time_sends_no_statement(served: Served) -> None:
    job_id = await _job(served)
    for path in _paths(job_id):
        assert await _reads(served, path, admin()) > 0, path
        served.clock.now += TTL_S - 0.01
        assert await _reads(served, path, admin()) == 0, path


async def test_a_read_after_the_cache_time_goes_to_the_database(served: Served) -> None:
    job_id = await _job(served)
    for path in _paths(job_id):
        await _reads(served, path, admin())
        served.clock.now += TTL_S
        assert await _reads(served, path, admin()) > 0, path


async def test_a_write_through_the_api_shows_in_the_next_read(served: Served) -> None:
    job_id = await _job(served)
    listed = await served.client.get("/api/v1/jobs", headers=admin())
    detail = await served.client.get(f"/api/v1/jobs/{job_id}", headers=admin())
    assert [job["state"] for job in listed.json()["jobs"]] == ["queued"]
    assert detail.json()["state"] == "queued"
    paused = await served.client.post(f"/api/v1/jobs/{job_id}/pause", headers=admin())
    assert paused.status_code == 200
    for path in _paths(job_id):
        assert await _reads(served, path, admin()) > 0, path
    listed = await served.client.get("/api/v1/jobs", headers=admin())
    detail = await served.client.get(f"/api/v1/jobs/{job_id}", headers=admin())
    assert [job["state"] for job in listed.json()["jobs"]] == ["paused"]
    assert detail.json()["state"] == "paused"


async def test_a_change_made_elsewhere_shows_once_the_cache_time_is_over(served: Served) -> None:
    job_id = await _job(served)
    await served.client.get(f"/api/v1/jobs/{job_id}", headers=admin())
    async with served.sessions.begin() as session:  # the controllers' process, say
        await repository.set_job_state(session, job_id, JobState.RUNNING)
    kept = await served.client.get(f"/api/v1/jobs/{job_id}", headers=admin())
    assert kept.json()["state"] == "queued"  # the documented staleness, at most TTL_S
    served.clock.now += TTL_S
    fresh = await served.client.get(f"/api/v1/jobs/{job_id}", headers=admin())
    assert fresh.json()["state"] == "running"


async def test_concurrent_misses_of_one_answer_make_one_read(served: Served) -> None:
    job_id = await _job(served)
    alone = await _reads(served, f"/api/v1/jobs/{job_id}", admin())
    served.clock.now += TTL_S
    before = len(served.statements)
    answers = await asyncio.gather(
        *(served.client.get(f"/api/v1/jobs/{job_id}", headers=admin()) for _ in range(20))
    )
    assert [answer.status_code for answer in answers] == [200] * 20
    assert len({answer.content for answer in answers}) == 1
    assert len(served.statements) - before == alone


async def test_each_caller_sees_only_what_their_token_shows(served: Served) -> None:
    made = await served.client.post("/api/v1/tokens", json={"owner": "alice"}, headers=admin())
    alice = {"Authorization": f"Bearer {made.json()['token']}"}
    made = await served.client.post("/api/v1/tokens", json={"owner": "bob"}, headers=admin())
    bob = {"Authorization": f"Bearer {made.json()['token']}"}
    job_id = await _job(served, owner="alice")
    for path in _paths(job_id):
        assert (await served.client.get(path, headers=alice)).status_code == 200
    assert (await served.client.get("/api/v1/jobs", headers=bob)).json() == {"jobs": []}
    for path in _paths(job_id)[1:]:
        assert (await served.client.get(path, headers=bob)).status_code == 404, path
    unsigned = await served.client.get("/api/v1/jobs")
    assert unsigned.status_code == 401  # the token is checked before any kept answer


async def test_a_cache_time_of_zero_reads_every_time(uncached: Served) -> None:
    job_id = await _job(uncached)
    for path in _paths(job_id):
        assert await _reads(uncached, path, admin()) > 0, path
        assert await _reads(uncached, path, admin()) > 0, path


async def test_a_read_in_flight_across_a_write_answers_its_callers_but_is_not_kept() -> None:
    cache = ReadCache(ttl_s=TTL_S, clock=ManualClock())
    release = asyncio.Event()
    reads: list[str] = []

    def reader(answer: bytes) -> Callable[[], Any]:
        async def read() -> bytes:
            reads.append(answer.decode())
            await release.wait()
            return answer

        return read

    early = asyncio.ensure_future(cache.answer("jobs", reader(b"before")))
    await asyncio.sleep(0)
    cache.clear()  # a write commits while the read is in flight
    late = asyncio.ensure_future(cache.answer("jobs", reader(b"after")))
    await asyncio.sleep(0)
    release.set()
    assert (await early, await late) == (b"before", b"after")
    assert await cache.answer("jobs", reader(b"again")) == b"after"
    assert reads == ["before", "after"]
