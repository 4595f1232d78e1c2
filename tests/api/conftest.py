"""Fixtures of the API tests: the app on a real Postgres database (cloned per module, emptied per
test), an httpx client speaking ASGI to it, tokens, and a small job seeded by the repository."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.config import RunConfig
from codevolve.core.program import Program, ProgramStatus
from codevolve.core.prompt import ProposalStatus
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.services.api.app import create_app
from codevolve.services.settings import Settings
from tests.integration.conftest import (  # noqa: F401  (fixtures used by name)
    evaluation_of,
    migrated_postgres_url,
    migrated_sqlite_url,
    postgres_available,
    postgres_module_database,
    postgres_template,
    sqlite_template,
)

ADMIN_TOKEN = "admin-secret-for-tests"
REDIS_URL = "redis://127.0.0.1:6379/0"
STARTUP_S = 30.0  # seconds


@dataclass
class Api:
    client: httpx.AsyncClient
    sessions: async_sessionmaker[AsyncSession]

    async def token(self, owner: str, *, can_upload: bool = False) -> dict[str, str]:
        """Headers carrying a new token of ``owner``, made through the admin endpoint."""
        response = await self.client.post(
            "/api/v1/tokens",
            json={"owner": owner, "can_upload": can_upload},
            headers=admin(),
        )
        assert response.status_code == 201, response.text
        return {"Authorization": f"Bearer {response.json()['token']}"}


def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
async def api(migrated_postgres_url: str) -> AsyncIterator[Api]:  # noqa: F811
    engine = create_engine(migrated_postgres_url)
    sessions = session_factory(engine)
    settings = Settings(db=migrated_postgres_url, admin_token=ADMIN_TOKEN, public_dashboard=False)
    app = create_app(settings, sessions=sessions)
    transport = httpx.ASGITransport(app=app)
    try:
        async with (
            app.router.lifespan_context(app),  # the health probe's connections
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        ):
            yield Api(client=client, sessions=sessions)
    finally:
        await engine.dispose()


@pytest.fixture
async def redis() -> AsyncIterator[tuple[Redis, RedisKeys]]:
    """Real Redis, with a key prefix of the test's own (removed after it)."""
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def served(app: FastAPI) -> Iterator[tuple[str, int]]:
    """``app`` served by uvicorn in a thread of this process (its lifespan runs there); yields
    the host and port."""
    config = uvicorn.Config(app, port=_free_port(), log_level="warning")
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_S
    while not instance.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield "127.0.0.1", config.port
    finally:
        instance.should_exit = True
        thread.join(timeout=10)


def _program(job_id: str, *, parent: Program | None, index: int, island: int = 0) -> Program:
    body = "return 1" if parent is None else f"return {index + 1}"
    return Program(
        id=uuid.uuid4().hex,
        job_id=job_id,
        source=f"def f(x):\n    # step {index}\n    {body}\n",
        content_hash=uuid.uuid4().hex,
        parent_id=None if parent is None else parent.id,
        island=island,
        generation=0 if parent is None else parent.generation + 1,
        proposal_index=index,
        status=ProgramStatus.PENDING,
        diff="",
        proposer="test",
    )


async def seed_job(api: Api, *, owner: str, programs: int = 4) -> tuple[str, list[Program]]:
    """A finished job of ``owner`` with a chain of evaluated programs over two islands (scores
    rising), each the elite of its own cell."""
    async with api.sessions.begin() as session:
        job = await repository.create_job(
            session, RunConfig(problem="gemm-tiling", islands=2, max_proposals=10), owner=owner
        )
        chain: list[Program] = []
        for index in range(programs):
            program = _program(
                job.id, parent=chain[-1] if chain else None, index=index, island=index % 2
            )
            await repository.insert_program(session, program)
            if chain:  # every program but the root came from a logged proposal
                await repository.record_proposal(
                    session,
                    job_id=job.id,
                    index=index,
                    parent_id=chain[-1].id,
                    island=program.island,
                    proposer="llm:test-model",
                    status=ProposalStatus.CHILD,
                    program_id=program.id,
                    tokens_in=1000,
                    tokens_out=200,
                    cost_usd=0.25,
                    prompt=f"improve <f> step {index}",
                    answer="<<<<<<< SEARCH",
                )
            await repository.apply_evaluation(
                session, evaluation_of(program, 1.0 + index / 10), cell=(index, index % 3)
            )
            await repository.add_elite(
                session,
                job_id=job.id,
                island=program.island,
                cell=(index, index % 3),
                program_id=program.id,
                score=1.0 + index / 10,
                epoch=0,
            )
            chain.append(program)
        await repository.update_job_best(session, job.id)
    return job.id, chain
