"""The supervisor runs every queued or running job to its end, locally or through Redis, and rides
out a Redis flush, a Redis restart that comes back empty, and Postgres dropping its connections."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest
from redis.asyncio import Redis
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.config import RunConfig
from codevolve.core.job import JobState
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.evaluator_workers.redis_queue import QueueTuning
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.services.runtime.supervisor import Supervisor, SupervisorOptions
from codevolve.services.runtime.workers import WorkerOptions, serve_worker
from tests.integration.conftest import running
from tests.integration.redis_support import PrivateRedis, delete_prefix

Sessions = async_sessionmaker[AsyncSession]
JOB_TIMEOUT_S = 90.0  # seconds; a 2-core machine shared with other work is slow


def _config(proposals: int = 16) -> RunConfig:
    return RunConfig(problem="gemm-tiling", max_proposals=proposals, max_in_flight=4)


async def _submit(sessions: Sessions, proposals: int = 16) -> str:
    async with sessions.begin() as session:
        return (await repository.create_job(session, _config(proposals))).id


async def _wait_for(
    sessions: Sessions, job_id: str, done: Callable[[dict[str, int], JobState], bool]
) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            async with sessions() as session:
                job = await repository.get_job(session, job_id)
                counts = await repository.program_counts(session, job_id)
        except DBAPIError as error:  # this reader's own connection was dropped while in use
            if not error.connection_invalidated:
                raise
            continue  # the pool connects afresh, as the controller's does
        assert job is not None
        finished = counts.evaluated + counts.failed + counts.rejected
        if done({"finished": finished, "pending": counts.pending}, job.state):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job_id} did not get there in {JOB_TIMEOUT_S} s")


async def _ends_done(sessions: Sessions, job_id: str) -> None:
    await _wait_for(
        sessions,
        job_id,
        lambda _c, state: state is not JobState.RUNNING and state is not JobState.QUEUED,
    )
    async with sessions() as session:
        job = await repository.get_job(session, job_id)
        counts = await repository.program_counts(session, job_id)
        proposals = await repository.proposal_counts(session, job_id)
    assert job is not None and job.state is JobState.DONE, job
    assert counts.pending == 0
    assert sum(proposals.values()) == job.proposals == 16


def _worker(url: str, keys: RedisKeys) -> Callable[[asyncio.Event], Awaitable[None]]:
    options = WorkerOptions(key_prefix=keys.prefix, tuning=QueueTuning(lease_s=5), heartbeat_s=1)

    def run(stop: asyncio.Event) -> Awaitable[None]:
        return serve_worker(
            url, capability="cpu", concurrency=2, name="w", options=options, stop=stop
        )

    return run


@pytest.fixture
async def pg_sessions(migrated_postgres_url: str) -> AsyncIterator[Sessions]:
    engine = create_engine(migrated_postgres_url)
    try:
        yield session_factory(engine)
    finally:
        await engine.dispose()


@pytest.mark.slow
async def test_jobs_submitted_before_and_during_the_run_finish_with_local_workers(
    migrated_sqlite_url: str,
) -> None:
    engine = create_engine(migrated_sqlite_url)
    sessions = session_factory(engine)
    try:
        first = await _submit(sessions)
        supervisor = Supervisor(sessions, options=SupervisorOptions(poll_s=0.2, local_workers=2))
        async with running(supervisor.run):
            await _ends_done(sessions, first)
            second = await _submit(sessions)  # e.g. by `codevolve submit` beside the server
            await _ends_done(sessions, second)
        assert supervisor.controllers_started == 2
    finally:
        await engine.dispose()


@pytest.mark.slow
async def test_a_redis_flush_mid_job_resends_pending_programs_and_the_job_finishes(
    pg_sessions: Sessions, redis_url: str, keys: RedisKeys
) -> None:
    redis = Redis.from_url(redis_url, decode_responses=True)
    options = SupervisorOptions(poll_s=0.2, key_prefix=keys.prefix, tuning=QueueTuning(watch_s=0.2))
    supervisor = Supervisor(pg_sessions, redis=redis, options=options)
    try:
        job = await _submit(pg_sessions)
        async with running(supervisor.run):
            # No worker yet: the job is running and its tasks wait in Redis when it is flushed
            # (a job this small would otherwise finish before a flush could meet a task).
            await _wait_for(pg_sessions, job, lambda c, s: s is JobState.RUNNING and c["pending"])
            delete_prefix(redis_url, keys.prefix)  # FLUSHDB, confined to this test's keys
            async with running(_worker(redis_url, keys)):
                await _ends_done(pg_sessions, job)
    finally:
        await redis.aclose()
    async with pg_sessions() as session:
        resent = [p for p in await repository.list_programs(session, job) if p.attempts > 1]
    assert resent, "the flush found no pending program to send again"


@pytest.mark.slow
async def test_the_job_goes_on_after_redis_restarts_empty(
    pg_sessions: Sessions, private_redis: PrivateRedis
) -> None:
    keys = RedisKeys("restart")
    redis = Redis.from_url(private_redis.url, decode_responses=True)
    options = SupervisorOptions(poll_s=0.2, key_prefix=keys.prefix, tuning=QueueTuning(watch_s=0.2))
    supervisor = Supervisor(pg_sessions, redis=redis, options=options)
    try:
        job = await _submit(pg_sessions)
        async with running(supervisor.run), running(_worker(private_redis.url, keys)):
            await _wait_for(pg_sessions, job, lambda c, _s: c["finished"] >= 3)
            private_redis.stop()
            await asyncio.sleep(1.0)
            private_redis.start()
            await _ends_done(pg_sessions, job)
    finally:
        await redis.aclose()


@pytest.mark.slow
async def test_the_job_goes_on_after_postgres_drops_every_connection(
    pg_sessions: Sessions, migrated_postgres_url: str, redis_url: str, keys: RedisKeys
) -> None:
    redis = Redis.from_url(redis_url, decode_responses=True)
    options = SupervisorOptions(poll_s=0.2, retry_s=0.2, key_prefix=keys.prefix)
    supervisor = Supervisor(pg_sessions, redis=redis, options=options)
    database = make_url(migrated_postgres_url).database
    admin = make_url(migrated_postgres_url).set(drivername="postgresql", database="postgres")
    try:
        job = await _submit(pg_sessions)
        async with running(supervisor.run), running(_worker(redis_url, keys)):
            await _wait_for(pg_sessions, job, lambda c, _s: c["finished"] >= 3)
            connection = await asyncpg.connect(admin.render_as_string(hide_password=False))
            try:
                killed = await connection.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = $1 AND pid <> pg_backend_pid()",
                    database,
                )
            finally:
                await connection.close()
            assert killed >= 1
            await _ends_done(pg_sessions, job)
    finally:
        await redis.aclose()
