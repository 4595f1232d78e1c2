"""What every request needs, as ``Annotated`` dependencies: settings, one session, the fleet.

The app keeps its live objects in ``app.state.codevolve`` (an :class:`AppState`), set by
``create_app`` or its lifespan; nothing is created at import time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.services.api.health import HealthProbe
from codevolve.services.api.logins import LoginStore
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
    fleet: FleetReader | None = None  # None: embedded mode, in-process workers only
    health: HealthProbe | None = None  # set by the lifespan: /health's own connections
    logins: LoginStore = field(default_factory=LoginStore)  # the dashboard's sign-ins
    extra: dict[str, object] = field(default_factory=dict)


def state_of(request: Request) -> AppState:
    state: AppState = request.app.state.codevolve
    return state


def settings_of(request: Request) -> Settings:
    return state_of(request).settings


async def _session(request: Request) -> AsyncIterator[AsyncSession]:
    """One session and one transaction per request, committed when the route returns (before the
    response is sent, so a 201 means the row is there) and rolled back when it raises."""
    sessions = state_of(request).sessions
    if sessions is None:
        raise RuntimeError("the app has no database: create_app(sessions=...) or run its lifespan")
    async with sessions() as session, session.begin():
        yield session


SessionDep = Annotated[AsyncSession, Depends(_session, scope="function")]
