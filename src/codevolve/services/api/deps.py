"""What every request needs, as ``Annotated`` dependencies: settings, one session, the fleet.

The app keeps its live objects in ``app.state.codevolve`` (an :class:`AppState`), set by
``create_app`` or its lifespan; nothing is created at import time.

A route that changes rows takes :data:`SessionDep` (one transaction, committed when the route
returns); a route that only reads takes :data:`ReadSessionDep`, whose statements run without a
transaction on Postgres: ``BEGIN`` and ``COMMIT`` were two of a read's three or four round trips
(docs/deploy.md, "Under load"). At Postgres' default READ COMMITTED every statement sees the
data as of its own start even inside a transaction, so a read route answers the same.

The read routes a burst asks most (the job list, a job, its programs, the workers) answer
through :func:`kept_answer`, from the process's read cache for up to ``api_read_cache_s``
(read_cache.py); a write route's commit clears it. They open their read session only when the
cache misses, so a kept answer costs no session and no connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request, Response
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from codevolve.core.results import ResultsPage
from codevolve.services.api.health import HealthProbe
from codevolve.services.api.logins import LoginStore
from codevolve.services.api.read_cache import ReadCache
from codevolve.services.api.token_cache import TokenCache
from codevolve.services.settings import Settings


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """One evaluation worker as its last heartbeat described it."""

    name: str
    capabilities: tuple[str, ...] = ()  # task streams and backends, e.g. ("cpu", "python")
    last_seen: datetime | None = None
    busy: int = 0  # tasks being evaluated
    concurrency: int = 0  # evaluations at once
    host: str = ""
    gpu_model: str | None = None


FleetReader = Callable[[], Awaitable[Sequence[WorkerStatus]]]


@dataclass(slots=True)
class AppState:
    settings: Settings
    sessions: async_sessionmaker[AsyncSession] | None = None  # set by the lifespan if not given
    readers: async_sessionmaker[AsyncSession] | None = None  # reading(sessions), set with them
    fleet: FleetReader | None = None  # None: embedded mode, in-process workers only
    health: HealthProbe | None = None  # set by the lifespan: /health's own connections
    logins: LoginStore = field(default_factory=LoginStore)  # the dashboard's sign-ins
    tokens: TokenCache = field(default_factory=TokenCache)  # live tokens, for a few seconds
    reads: ReadCache = field(default_factory=ReadCache)  # read answers, for about a second
    results_pages: tuple[ResultsPage, ...] = ()  # the problems' pages the app serves
    extra: dict[str, object] = field(default_factory=dict)


def reading(sessions: async_sessionmaker[AsyncSession]) -> async_sessionmaker[AsyncSession]:
    """``sessions`` for reads: on Postgres their connections run each statement on its own
    (autocommit: no ``BEGIN``, no ``COMMIT``); SQLite starts no transaction for a read anyway."""
    bind = sessions.kw.get("bind")
    if not isinstance(bind, AsyncEngine) or bind.dialect.name != "postgresql":
        return sessions
    return async_sessionmaker(
        bind.execution_options(isolation_level="AUTOCOMMIT"),
        **{key: value for key, value in sessions.kw.items() if key != "bind"},
    )


def state_of(request: Request) -> AppState:
    state: AppState = request.app.state.codevolve
    return state


def settings_of(request: Request) -> Settings:
    return state_of(request).settings


async def _session(request: Request) -> AsyncIterator[AsyncSession]:
    """One session and one transaction per request, committed when the route returns (before the
    response is sent, so a 201 means the row is there) and rolled back when it raises."""
    state = state_of(request)
    if state.sessions is None:
        raise RuntimeError("the app has no database: create_app(sessions=...) or run its lifespan")
    async with state.sessions() as session, session.begin():
        yield session
    state.reads.clear()  # committed: the next read shows it


async def _read_session(request: Request) -> AsyncIterator[AsyncSession]:
    """One session per request for a route that only reads: no transaction to commit."""
    async with read_sessions_of(request)() as session:
        yield session


def read_sessions_of(request: Request) -> async_sessionmaker[AsyncSession]:
    readers = state_of(request).readers
    if readers is None:
        raise RuntimeError("the app has no database: create_app(sessions=...) or run its lifespan")
    return readers


async def kept_answer(
    request: Request, key: Hashable, read: Callable[[], Awaitable[BaseModel]]
) -> Response:
    """The JSON answer of ``read``, kept under ``key`` for a moment by the process's read cache
    (read_cache.py): the key names the route, its parameters and what the caller may see."""

    async def as_json() -> bytes:
        return (await read()).model_dump_json().encode()

    body = await state_of(request).reads.answer(key, as_json)
    return Response(body, media_type="application/json")


SessionDep = Annotated[AsyncSession, Depends(_session, scope="function")]
ReadSessionDep = Annotated[AsyncSession, Depends(_read_session, scope="function")]
