"""The FastAPI app: REST API under ``/api/v1``, the dashboard, ``/metrics``.

``create_app(settings)`` builds the app; it owns no global state. Given ``sessions`` (a session
factory the caller created, e.g. ``codevolve serve`` sharing its engine with the supervisor) it
uses them; otherwise its lifespan creates the engine from ``settings.db``, migrates the database to
head, and disposes of the engine at shutdown. ``fleet`` reads worker heartbeats (distributed mode);
without it the fleet is the embedded one and lists no workers.

Errors answer ``{"detail": ...}`` (errors.py); bodies are capped per route (limits.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.exceptions import HTTPException

import codevolve
from codevolve.program_db.engine import create_engine, session_factory, upgrade
from codevolve.program_db.errors import UnknownJobError, UnknownProgramError
from codevolve.services.api.deps import AppState, FleetReader
from codevolve.services.api.errors import ErrorBoundary, clean, http_error, validation_failed
from codevolve.services.api.limits import (
    BUNDLE_PATH,
    MAX_BUNDLE_BODY_BYTES,
    MAX_JSON_BODY_BYTES,
    BodyLimit,
)
from codevolve.services.api.routes import dashboard, jobs, programs, system, tokens
from codevolve.services.settings import Settings, normalise_db_url

STATIC = Path(__file__).parent / "static"


def create_app(
    settings: Settings,
    *,
    sessions: async_sessionmaker[AsyncSession] | None = None,
    fleet: FleetReader | None = None,
) -> FastAPI:
    state = AppState(settings=settings, sessions=sessions, fleet=fleet)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if state.sessions is not None:
            yield
            return
        engine = create_engine(normalise_db_url(settings.db))
        try:
            await upgrade(engine)
            state.sessions = session_factory(engine)
            yield
        finally:
            state.sessions = None
            await engine.dispose()

    app = FastAPI(
        title="codevolve",
        version=codevolve.__version__,
        description="Evolutionary code search: submit and steer jobs, inspect programs.",
        lifespan=lifespan,
    )
    app.state.codevolve = state
    for router in (jobs.router, programs.router, tokens.router, system.router, dashboard.router):
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_exception_handler(RequestValidationError, validation_failed)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(UnknownJobError, _not_found)
    app.add_exception_handler(UnknownProgramError, _not_found)
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
