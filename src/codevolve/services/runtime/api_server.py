"""The API's part of ``codevolve serve``: the REST API and dashboard under uvicorn.

It runs in a process of its own (``serve --role api``, started by ``serve`` as its child, or run
alone beside ``serve --role controllers``): in the controllers' process every request waited for
CPU behind twenty controllers in one event loop and one GIL (docs/deploy.md, "Under load"). It
has its own engine (the API's pool, runtime/pools.py) and its own Redis client for the workers'
heartbeats; it shares nothing with the controllers but the database and Redis.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass

import uvicorn
from redis.asyncio import Redis

from codevolve.core.errors import ConfigError
from codevolve.evaluator_workers.redis_keys import DEFAULT_PREFIX, RedisKeys
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.services.api.app import create_app
from codevolve.services.api.fleet import redis_fleet
from codevolve.services.database import open_database
from codevolve.services.runtime.pools import api_pool
from codevolve.services.runtime.processes import stop_on_signals, stop_with_parent
from codevolve.services.settings import Settings

log = logging.getLogger(__name__)

# seconds open requests get to finish once the API is asked to stop; under the parent's
# processes.STOP_GRACE_S, so that a stop is never a kill
GRACEFUL_SHUTDOWN_S = 5
BACKLOG = 2048  # connections waiting to be accepted (uvicorn's own default)


@dataclass(frozen=True, slots=True)
class ApiOptions:
    host: str = "127.0.0.1"  # address to listen on
    port: int = 8000
    key_prefix: str = DEFAULT_PREFIX  # of the workers' heartbeats in Redis
    parent_pid: int | None = None  # started by serve: stop when that process is gone
    listen_fd: int | None = None  # started by serve: accept on its socket, shared by every API


async def serve_api(settings: Settings, options: ApiOptions) -> bool:
    """Migrate ``settings.db`` to head, then serve the API until SIGTERM or SIGINT, the parent
    process is gone, or uvicorn ends on its own. True when it stopped as asked, False when the
    server ended by itself (it could not listen, its startup failed)."""
    async with open_database(settings.db, write=True):
        pass  # a no-op when serve's controllers migrated it first
    stop = asyncio.Event()
    stop_on_signals(stop)
    engine = create_engine(settings.db, pool=api_pool(settings))
    redis = (
        None
        if settings.redis_url is None
        else Redis.from_url(settings.redis_url, decode_responses=True)
    )
    try:
        fleet = None if redis is None else redis_fleet(redis, RedisKeys(options.key_prefix))
        app = create_app(settings, sessions=session_factory(engine), fleet=fleet)
        config = uvicorn.Config(
            app,
            host=options.host,
            port=options.port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
        server = uvicorn.Server(config)
        sockets = None if options.listen_fd is None else [socket.socket(fileno=options.listen_fd)]
        log.info("the API answers on http://%s:%d", options.host, options.port)
        async with asyncio.TaskGroup() as tg:
            if options.parent_pid is not None:
                tg.create_task(stop_with_parent(options.parent_pid, stop))
            tg.create_task(_exit_on(stop, server))
            try:
                await server.serve(sockets=sockets)
            finally:
                asked = stop.is_set()
                stop.set()
        return asked
    finally:
        if redis is not None:
            await redis.aclose()
        await engine.dispose()


def listening_socket(host: str, port: int) -> socket.socket:
    """The API's socket, bound and listening, for ``serve`` to hand to its API processes; a
    port that cannot be used is a ConfigError naming it."""
    try:
        return socket.create_server((host, port), backlog=BACKLOG)
    except OSError as exc:
        raise ConfigError(f"--host {host} --port {port}: cannot listen there: {exc}") from exc


async def _exit_on(stop: asyncio.Event, server: uvicorn.Server) -> None:
    await stop.wait()
    server.should_exit = True
