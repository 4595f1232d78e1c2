"""The supervisor: runs a controller for every job the database says is queued or running.

It is what ``codevolve serve`` runs. Every ``poll_s`` it lists the jobs in state queued or running
and starts a controller for each one it does not run yet: jobs created by ``codevolve submit`` or
the API, jobs resumed, and after a crash of the whole process, the jobs that were running (a
controller resumes from the database: pending programs are sent again). A controller that raises
is logged and started again on a later poll: with one warning line naming the job when the
database was unreachable (it resumes from the database), with the traceback for any other failure
(counted in ``controller_restarts``). A controller that merely waits for a pool connection does
not stop (``program_db.engine.when_free``). At most ``max_running_jobs`` controllers run at once
(their pool is sized for that many, see ``runtime/pools.py``); further jobs wait, queued, for one
to end.

With a Redis URL, tasks go to the Redis Streams queue and remote workers evaluate them; the
supervisor publishes bundle problems for them, and when Redis loses its data it has the controller
resend every pending program. Without one, each job gets an in-process queue served by worker
loops sharing one local sandbox pool, as in the embedded ``run``.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from redis.asyncio import Redis
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.errors import ConfigError
from codevolve.core.job import Job, JobState
from codevolve.core.problem import Problem
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.evaluator_workers.redis_bundles import bundle_id_of, publish_bundle
from codevolve.evaluator_workers.redis_keys import DEFAULT_PREFIX, RedisKeys
from codevolve.evaluator_workers.redis_queue import QueueTuning, RedisTaskQueue
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import run_worker
from codevolve.program_db import repository
from codevolve.proposers.base import Proposer
from codevolve.services.controller.loop import Controller
from codevolve.services.runtime.embedded import open_proposer
from codevolve.services.runtime.problems import stored_problem

log = logging.getLogger(__name__)

ACTIVE = (JobState.QUEUED, JobState.RUNNING)


@dataclass(frozen=True, slots=True)
class SupervisorOptions:
    poll_s: float = 1.0  # seconds between looks for jobs to run
    retry_s: float = 2.0  # seconds before a controller that raised is started again
    local_workers: int = 2  # in-process evaluation loops per job when there is no Redis
    key_prefix: str = DEFAULT_PREFIX
    proposal_processes: int = 0  # per job: see Controller; 0 makes proposals in this process
    tuning: QueueTuning = field(default_factory=QueueTuning)
    max_running_jobs: int = 20  # controllers at once; the pool is sized for them (pools.py)


class Supervisor:
    """One per database: several supervisors on one database would run the same jobs twice."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        redis: Redis | None = None,
        options: SupervisorOptions | None = None,
    ) -> None:
        self._sessions = sessions
        self._redis = redis
        self._options = options or SupervisorOptions()
        self._keys = RedisKeys(self._options.key_prefix)
        self._running: set[str] = set()
        self._bundles = Path(tempfile.mkdtemp(prefix="codevolve-bundles-"))
        self._pool: SandboxPool | None = None
        self.controllers_started = 0
        self.controller_restarts = 0  # controllers that failed (not for the database) and restart
        self.database_outages = 0  # controllers stopped because the database could not be reached
        self._waiting_shown = 0  # jobs waiting for a controller, as last logged

    @property
    def running(self) -> frozenset[str]:
        """Ids of the jobs a controller runs now."""
        return frozenset(self._running)

    async def run(self, stop: asyncio.Event) -> None:
        """Run jobs until ``stop``; their controllers are then cancelled (the jobs stay running
        in the database and resume at the next start)."""
        pool = None if self._redis is not None else SandboxPool(size=self._options.local_workers)
        try:
            if pool is not None:
                await asyncio.to_thread(pool.start)
            self._pool = pool
            async with asyncio.TaskGroup() as tg:
                jobs: dict[str, asyncio.Task[None]] = {}
                while not stop.is_set():
                    for job in self._to_start(await self._active_jobs()):
                        self._running.add(job.id)
                        jobs[job.id] = tg.create_task(self._manage(job))
                    try:
                        async with asyncio.timeout(self._options.poll_s):
                            await stop.wait()
                    except TimeoutError:
                        pass
                for task in jobs.values():
                    task.cancel()
        finally:
            if pool is not None:
                pool.close()

    def _to_start(self, active: list[Job]) -> list[Job]:
        """The active jobs without a controller that fit under ``max_running_jobs``, oldest
        first; the number left waiting is logged when it changes."""
        waiting = [job for job in active if job.id not in self._running]
        room = max(0, self._options.max_running_jobs - len(self._running))
        left = len(waiting) - room if len(waiting) > room else 0
        if left != self._waiting_shown:
            self._waiting_shown = left
            log.info(
                "%d job(s) wait for a controller: %d run at most (CODEVOLVE_MAX_RUNNING_JOBS)",
                left,
                self._options.max_running_jobs,
            )
        return waiting[:room]

    async def _active_jobs(self) -> list[Job]:
        try:
            async with self._sessions() as session:
                jobs = await repository.list_jobs(session)
        except (OSError, DBAPIError, PoolTimeout) as exc:  # the pool connects afresh next time
            log.warning("database unreachable (%s); jobs are looked for again", exc)
            return []
        return sorted((job for job in jobs if job.state in ACTIVE), key=lambda j: j.created_at)

    async def _manage(self, job: Job) -> None:
        """Run one job's controller to its end. The per-job error boundary: whatever breaks a
        controller is logged, and the job is taken up again after ``retry_s``."""
        try:
            await self._run_job(job)
        except asyncio.CancelledError:
            raise
        except ConfigError as exc:  # a job that can never run: say why and stop trying
            log.error("job %s cannot run: %s", job.id, exc)
            await self._fail(job, str(exc))
        except Exception as exc:  # the controller's boundary (see the docstring)
            if _database_unreachable(exc):
                self.database_outages += 1
                log.warning(
                    "job %s: the database is unavailable (%s); the job resumes in %.0f s",
                    job.id,
                    _first_line(exc),
                    self._options.retry_s,
                )
            else:
                self.controller_restarts += 1
                log.exception("job %s: controller stopped; it is started again", job.id)
            await asyncio.sleep(self._options.retry_s)
        finally:
            self._running.discard(job.id)

    async def _fail(self, job: Job, reason: str) -> None:
        async with self._sessions.begin() as session:
            await repository.set_job_state(session, job.id, JobState.FAILED, error=reason)

    async def _run_job(self, job: Job) -> None:
        problem, files = await self._problem(job)
        self.controllers_started += 1
        if self._redis is None:
            await self._run_local(job, problem)
        else:
            await self._run_distributed(job, problem, files, self._redis)

    async def _problem(self, job: Job) -> tuple[Problem, dict[str, bytes]]:
        """The job's problem, and for a bundle its files (workers get them through Redis)."""
        return await stored_problem(self._sessions, job.config.problem, self._bundles)

    def _controller(
        self, job: Job, problem: Problem, queue: LocalQueue | RedisTaskQueue, proposer: Proposer
    ) -> Controller:
        return Controller(
            job,
            sessions=self._sessions,
            queue=queue,
            problem=problem,
            proposer=proposer,
            proposal_processes=self._options.proposal_processes,
        )

    async def _run_local(self, job: Job, problem: Problem) -> None:
        assert self._pool is not None
        queue = LocalQueue()
        stop = asyncio.Event()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(
                run_worker(
                    queue,
                    resolve_problem=lambda _name: problem,  # these loops serve this job only
                    pool=self._pool,
                    concurrency=self._options.local_workers,
                    name=f"local-{job.id[:8]}",
                    stop=stop,
                )
            )
            try:
                async with open_proposer(job.config, problem) as proposer:
                    state = await self._controller(job, problem, queue, proposer).run()
            finally:
                stop.set()
        log.info("job %s ended: %s", job.id, state.value)

    async def _run_distributed(
        self, job: Job, problem: Problem, files: dict[str, bytes], redis: Redis
    ) -> None:
        queue = RedisTaskQueue(redis, job.id, keys=self._keys, tuning=self._options.tuning)
        await queue.start()
        await self._publish(job, files, redis)
        done = asyncio.Event()
        async with open_proposer(job.config, problem) as proposer, asyncio.TaskGroup() as tg:
            controller = self._controller(job, problem, queue, proposer)
            tg.create_task(self._resend_on_loss(job, files, queue, controller, done))
            try:
                state = await controller.run()
            finally:
                done.set()
        await queue.close()
        log.info("job %s ended: %s", job.id, state.value)

    async def _publish(self, job: Job, files: dict[str, bytes], redis: Redis) -> None:
        bundle = bundle_id_of(job.config.problem)
        if bundle is not None:
            await publish_bundle(redis, self._keys, bundle, files)

    async def _resend_on_loss(
        self,
        job: Job,
        files: dict[str, bytes],
        queue: RedisTaskQueue,
        controller: Controller,
        done: asyncio.Event,
    ) -> None:
        """When Redis lost its data: publish the bundle again, resend every pending program."""
        assert self._redis is not None
        while not done.is_set():
            try:
                async with asyncio.timeout(self._options.poll_s):
                    await queue.lost.wait()
            except TimeoutError:
                continue
            queue.lost.clear()
            await self._publish(job, files, self._redis)
            resent = await controller.requeue_pending()
            log.warning(
                "job %s: %d pending program(s) sent again after redis lost data", job.id, resent
            )


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions a (nested) exception group holds, or ``exc`` itself."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _database_unreachable(exc: BaseException) -> bool:
    """Every error that stopped the controller says the database is unavailable: a refused or
    dropped connection, the server failing, or no pool connection in time; the resume from the
    database is the recovery. Not a statement the code got wrong."""
    return all(
        isinstance(leaf, OSError | PoolTimeout | OperationalError | InterfaceError)
        or (isinstance(leaf, DBAPIError) and leaf.connection_invalidated)
        for leaf in _leaves(exc)
    )


def _first_line(exc: BaseException) -> str:
    leaf = _leaves(exc)[0]
    lines = str(leaf).strip().splitlines()
    return f"{type(leaf).__name__}: {lines[0] if lines else ''}"
