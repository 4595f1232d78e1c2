"""``codevolve serve``: the controllers in this process, the API in a child process.

The whole server is two processes against the same database and Redis:

- this one migrates the database, then runs the supervisor (a controller per queued or running
  job, runtime/supervisor.py) on the controllers' pool;
- a child runs the API and dashboard (runtime/api_server.py, ``serve --role api``) on the API's
  pool. In one process the API's requests waited behind the controllers' work for the one event
  loop and the GIL: with 20 running jobs a burst of 200 requests took seconds (docs/deploy.md).

SIGTERM or SIGINT stop both; if either part ends on its own, the other is stopped and
:func:`serve` says which part ended (runtime/processes.py has the contract between the two).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from redis.asyncio import Redis

from codevolve.program_db.engine import create_engine, session_factory
from codevolve.services.database import open_database
from codevolve.services.runtime.embedded import tune_gc
from codevolve.services.runtime.pools import controller_pool
from codevolve.services.runtime.processes import Command, Ended, child_process, stop_on_signals
from codevolve.services.runtime.supervisor import Supervisor, SupervisorOptions

log = logging.getLogger(__name__)


async def serve(
    db: str,
    redis_url: str | None,
    options: SupervisorOptions,
    *,
    api: Sequence[Command],
    on_start: Callable[[], None] = lambda: None,
) -> Ended | None:
    """Migrate ``db``, call ``on_start`` (the command line says where it serves), start the
    ``api`` processes (none: the controllers only), and run the controllers until SIGTERM or
    SIGINT. Returns how an API process ended when one ended on its own (everything else was then
    stopped), None after a requested stop."""
    tune_gc()
    async with open_database(db, write=True):
        pass  # migrated to head; each role has an engine of its own
    on_start()
    stop = asyncio.Event()
    stop_on_signals(stop)
    async with contextlib.AsyncExitStack() as children:
        started = [await children.enter_async_context(child_process(part)) for part in api]
        async with asyncio.TaskGroup() as tg:
            tg.create_task(run_controllers(db, redis_url, options, stop))
            watches = [tg.create_task(child.watch(stop)) for child in started]
    log.info("serve stopped")
    return next((ended for watch in watches if (ended := watch.result()) is not None), None)


async def run_controllers(
    db: str, redis_url: str | None, options: SupervisorOptions, stop: asyncio.Event
) -> None:
    """The supervisor on the controllers' pool, until ``stop``."""
    engine = create_engine(db, pool=controller_pool(options.max_running_jobs))
    redis = None if redis_url is None else Redis.from_url(redis_url, decode_responses=True)
    try:
        supervisor = Supervisor(session_factory(engine), redis=redis, options=options)
        await supervisor.run(stop)
    finally:
        if redis is not None:
            await redis.aclose()
        await engine.dispose()
