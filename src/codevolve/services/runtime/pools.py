"""Database pools sized by role: the API's, the controllers', the health check's.

``codevolve serve`` once ran the API and a controller per running job in one process, on one
shared pool (SQLAlchemy's 5 + 10): twenty controllers and a burst of requests took every
connection, the requests waited behind the controllers, and controllers timed out waiting for a
connection. So each role has its own engine and pool (and now its own process, runtime/server.py):

- the controllers': room for every running controller at its busiest
  (:data:`CONNECTIONS_PER_JOB`) and the supervisor's own reads, for at most ``max_running_jobs``
  controllers (the supervisor runs no more: further jobs wait queued); a checkout never waits for
  another job's connection;
- each API process's: ``api_pool_size`` connections; a request that finds them all in use waits
  up to ``api_pool_timeout_s`` and is then answered 503 (the controllers are not slowed by it);
- the health check's: one connection and a short timeout, so that ``/api/v1/health`` answers at
  once even when the API's pool is busy (services/api/health.py).

On Postgres the total must fit the server's ``max_connections`` (100 by default):
``3 * max_running_jobs + 2 + api_processes * (api_pool_size + 1)`` (73 with the defaults).
"""

from __future__ import annotations

from codevolve.program_db.engine import PoolSize
from codevolve.services.settings import Settings

# A controller's connections at its busiest (program_db/job_store.py): the autocommit connection it
# holds for proposal batches, an archive transaction and a reading transaction.
CONNECTIONS_PER_JOB = 3
SUPERVISOR_CONNECTIONS = 2  # the job scan, and a problem lookup or a job marked failed
# seconds; a controller's own connections are always in its pool, so a wait this long means the
# database is slow to open connections: the controller logs it and waits on (engine.when_free)
CONTROLLER_POOL_TIMEOUT_S = 30.0
HEALTH_POOL = PoolSize(size=1, overflow=0, timeout_s=1.0)


def controller_pool(max_running_jobs: int) -> PoolSize:
    """The pool of the supervisor and its controllers, for ``max_running_jobs`` at once."""
    size = CONNECTIONS_PER_JOB * max_running_jobs + SUPERVISOR_CONNECTIONS
    return PoolSize(size=size, overflow=0, timeout_s=CONTROLLER_POOL_TIMEOUT_S)


def api_pool(settings: Settings) -> PoolSize:
    """The pool of the API's requests."""
    return PoolSize(size=settings.api_pool_size, overflow=0, timeout_s=settings.api_pool_timeout_s)
