"""The FastAPI app: REST API under ``/api/v1``, the dashboard, ``/metrics``.

``create_app(settings)`` builds the app; it owns no global state. Given ``sessions`` (a session
factory the caller created, e.g. ``codevolve serve`` sharing its engine with the supervisor) it
uses them; otherwise its lifespan creates the engine from ``settings.db`` (its pool sized by
``api_pool_size``), migrates the database to head, and disposes of the engine at shutdown. Either
way the lifespan opens the health probe's own connections (health.py). ``fleet`` reads worker
heartbeats (distributed mode); without it the fleet is the embedded one and lists no workers.

Errors answer ``{"detail": ...}`` (errors.py); bodies are capped per route (limits.py). A request
that waits ``api_pool_timeout_s`` for a database connection is answered 503 with Retry-After.
The read routes a burst asks most answer from a cache kept ``api_read_cache_s`` (read_cache.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from starlette.exceptions import HTTPException

import codevolve
from codevolve.problems import registry
from codevolve.program_db.engine import create_engine, session_factory, upgrade
from codevolve.program_db.errors import UnknownJobError, UnknownProgramError
from codevolve.services.api.deps import AppState, FleetReader, reading
from codevolve.services.api.errors import ErrorBoundary, clean, http_error, validation_failed
from codevolve.services.api.health import HealthProbe
from codevolve.services.api.limits import (
    BUNDLE_PATH,
    MAX_BUNDLE_BODY_BYTES,
    MAX_JSON_BODY_BYTES,
    BodyLimit,
)
from codevolve.services.api.read_cache import ReadCache
from codevolve.services.api.routes import dashboard, jobs, programs, results, system, tokens
from codevolve.services.runtime.pools import api_pool
from codevolve.services.settings import Settings, normalise_db_url

STATIC = Path(__file__).parent / "static"
RETRY_AFTER_S = 1  # seconds a client is asked to wait when every API connection is busy


def create_app(
    settings: Settings,
    *,
    sessions: async_sessionmaker[AsyncSession] | None = None,
    fleet: FleetReader | None = None,
) -> FastAPI:
    with_pages = registry.results_pages()  # (plug-in, its results page)
    state = AppState(
        settings=settings,
        results_pages=tuple(page for _, page in with_pages),
        sessions=sessions,
        readers=None if sessions is None else reading(sessions),
        fleet=fleet,
        reads=ReadCache(ttl_s=settings.api_read_cache_s),
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if state.sessions is None:
                engine = create_engine(normalise_db_url(settings.db), pool=api_pool(settings))
                stack.push_async_callback(engine.dispose)
                await upgrade(engine)
                state.sessions = session_factory(engine)
                state.readers = reading(state.sessions)
                stack.callback(setattr, state, "sessions", None)
                stack.callback(setattr, state, "readers", None)
            probe = HealthProbe(_url_of(state.sessions), settings.redis_url)
            stack.push_async_callback(probe.close)
            state.health = probe
            stack.callback(setattr, state, "health", None)
            yield

    app = FastAPI(
        title="codevolve",
        version=codevolve.__version__,
        description="Evolutionary code search: submit and steer jobs, inspect programs.",
        lifespan=lifespan,
    )
    app.state.codevolve = state
    routers = (jobs, programs, tokens, system, dashboard)
    for routes in routers:
        app.include_router(routes.router)
    for router in results.routers(
        plugin for plugin, _ in with_pages
    ):  # after the others: a page takes no route of theirs
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_exception_handler(RequestValidationError, validation_failed)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(UnknownJobError, _not_found)
    app.add_exception_handler(UnknownProgramError, _not_found)
    app.add_exception_handler(PoolTimeout, _database_busy)
    limits = {BUNDLE_PATH: MAX_BUNDLE_BODY_BYTES}
    app.add_middleware(BodyLimit, default=MAX_JSON_BODY_BYTES, limits=limits)
    app.add_middleware(ErrorBoundary)  # added last: the outermost of the two
    return app


def app_from_env() -> FastAPI:
    """The app configured by ``CODEVOLVE_*`` variables: ``uvicorn --factory
    codevolve.services.api.app:app_from_env``."""
    return create_app(Settings())


async def _not_found(_request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": clean(str(exc))}, status_code=status.HTTP_404_NOT_FOUND)


async def _database_busy(_request: Request, _exc: Exception) -> JSONResponse:
    """Every API connection stayed in use for ``api_pool_timeout_s``: a burst, not a fault."""
    return JSONResponse(
        {"detail": "the database is busy: every API connection is in use; retry shortly"},
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def _url_of(sessions: async_sessionmaker[AsyncSession]) -> str:
    """The database URL the sessions use (the health probe connects to the same database)."""
    bind = sessions.kw.get("bind")
    if not isinstance(bind, AsyncEngine):
        raise TypeError("the app's sessions must be bound to an engine")
    return bind.url.render_as_string(hide_password=False)
