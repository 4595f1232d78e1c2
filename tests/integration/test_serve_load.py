"""Many running jobs and a burst of API requests in one process, as ``codevolve serve`` runs them
(bench/serve_load.py, smaller): the pools sized by role are not exhausted, no controller is
restarted, every request is answered. Also: the supervisor runs at most ``max_running_jobs``
controllers, and a pool wait is a wait, not an error."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.config import RunConfig
from codevolve.core.job import JobState
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.evaluator_workers.redis_queue import QueueTuning
from codevolve.program_db import repository
from codevolve.program_db.engine import PoolSize, create_engine, session_factory, when_free
from codevolve.services.api.app import create_app
from codevolve.services.runtime import pools
from codevolve.services.runtime.supervisor import Supervisor, SupervisorOptions
from codevolve.services.runtime.workers import WorkerOptions, serve_worker
from codevolve.services.settings import Settings
from tests.integration.conftest import running

JOBS = 16
REQUESTS = 80
TIMEOUT_S = 1.0  # seconds: pools wait this long before a timeout, so exhaustion shows at once
ADMIN = "admin-token-of-the-load-test"
Sessions = async_sessionmaker[AsyncSession]


async def _submit(sessions: Sessions, seed: int) -> str:
    config = RunConfig(problem="gemm-tiling", max_proposals=1_000_000, max_in_flight=2, seed=seed)
    async with sessions.begin() as session:
        return (await repository.create_job(session, config)).id


async def _states(sessions: Sessions, ids: list[str]) -> dict[str, JobState]:
    async with sessions() as session:
        jobs = await repository.list_jobs(session)
    return {job.id: job.state for job in jobs if job.id in ids}


async def _wait(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout_s} s"
        await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_many_running_jobs_and_a_burst_of_requests_exhaust_no_pool(
    migrated_postgres_url: str, redis_url: str, keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    controllers = create_engine(
        migrated_postgres_url,
        pool=PoolSize(pools.controller_pool(JOBS).size, overflow=0, timeout_s=TIMEOUT_S),
    )
    settings = Settings(db=migrated_postgres_url, redis_url=redis_url, admin_token=ADMIN)
    api_engine = create_engine(
        migrated_postgres_url,
        pool=PoolSize(settings.api_pool_size, overflow=0, timeout_s=TIMEOUT_S),
    )
    sessions = session_factory(controllers)
    redis = Redis.from_url(redis_url, decode_responses=True)
    options = SupervisorOptions(
        poll_s=0.2, retry_s=0.2, key_prefix=keys.prefix, max_running_jobs=JOBS
    )
    supervisor = Supervisor(sessions, redis=redis, options=options)
    worker_options = WorkerOptions(
        key_prefix=keys.prefix, tuning=QueueTuning(lease_s=5), heartbeat_s=1
    )

    def worker(stop: asyncio.Event) -> Awaitable[None]:
        return serve_worker(
            redis_url, capability="cpu", concurrency=2, name="w", options=worker_options, stop=stop
        )

    app = create_app(settings, sessions=session_factory(api_engine))
    transport = httpx.ASGITransport(app=app)
    try:
        ids = [await _submit(sessions, seed) for seed in range(JOBS)]
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
            running(supervisor.run),
            running(worker),
        ):
            client.headers["Authorization"] = f"Bearer {ADMIN}"  # sees every job

            async def all_busy() -> bool:  # each job running and past its seed program
                async with sessions() as session:
                    counts = [await repository.program_counts(session, i) for i in ids]
                return all(c.evaluated >= 2 for c in counts)

            await _wait(all_busy, "every job evaluating programs", timeout_s=25.0)
            paths = [
                ["/api/v1/jobs", f"/api/v1/jobs/{ids[n % JOBS]}", "/api/v1/health"][n % 3]
                for n in range(REQUESTS)
            ]
            answers = await asyncio.gather(*(client.get(path) for path in paths))
            await asyncio.sleep(2 * TIMEOUT_S)  # a controller short of a connection would fail
            states = await _states(sessions, ids)
    finally:
        await redis.aclose()
        await controllers.dispose()
        await api_engine.dispose()
    assert sorted(response.status_code for response in answers) == [200] * REQUESTS
    assert set(states.values()) == {JobState.RUNNING}
    assert supervisor.controllers_started == JOBS
    assert (supervisor.controller_restarts, supervisor.database_outages) == (0, 0)
    assert "QueuePool limit" not in caplog.text


async def test_the_supervisor_runs_at_most_max_running_jobs_and_the_rest_wait_queued(
    migrated_postgres_url: str, redis_url: str, keys: RedisKeys
) -> None:
    engine = create_engine(migrated_postgres_url, pool=pools.controller_pool(2))
    sessions = session_factory(engine)
    redis = Redis.from_url(redis_url, decode_responses=True)
    options = SupervisorOptions(poll_s=0.1, key_prefix=keys.prefix, max_running_jobs=2)
    supervisor = Supervisor(sessions, redis=redis, options=options)
    try:
        ids = [await _submit(sessions, seed) for seed in range(3)]
        async with running(supervisor.run):  # no worker: the jobs stay running

            async def two_running() -> bool:
                return len(supervisor.running) == 2

            await _wait(two_running, "two controllers")
            await asyncio.sleep(0.5)  # several polls: the third is still not started
            assert len(supervisor.running) == 2
            states = await _states(sessions, ids)
    finally:
        await redis.aclose()
        await engine.dispose()
    assert sorted(states.values()) == [JobState.QUEUED, JobState.RUNNING, JobState.RUNNING]
    assert states[ids[2]] is JobState.QUEUED  # the oldest run first
    assert supervisor.controllers_started == 2


async def test_a_checkout_that_times_out_waits_on_instead_of_failing(
    migrated_postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = create_engine(migrated_postgres_url, pool=PoolSize(size=1, overflow=0, timeout_s=0.2))
    try:
        held = await engine.connect()

        async def give_back() -> None:
            await asyncio.sleep(0.5)  # longer than the pool's timeout
            await held.close()

        with caplog.at_level(logging.WARNING):
            async with asyncio.TaskGroup() as tg:
                tg.create_task(give_back())
                connection = await when_free(engine.connect, waiter="job j1")
            await connection.close()
    finally:
        await engine.dispose()
    assert "job j1 waits for a database connection" in caplog.text
