"""The supervisor: runs a controller for every job the database says is queued or running.

It is what ``codevolve serve`` runs. Every ``poll_s`` it lists the jobs in state queued or running
and starts a controller for each one it does not run yet: jobs created by ``codevolve submit`` or
the API, jobs resumed, and after a crash of the whole process, the jobs that were running (a
controller resumes from the database: pending programs are sent again). A controller that raises
(the database went away mid-transaction, say) is logged and started again on a later poll.

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
from sqlalchemy.exc import DBAPIError
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
                    for job in await self._active_jobs():
                        if job.id not in self._running:
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

    async def _active_jobs(self) -> list[Job]:
        try:
            async with self._sessions() as session:
                jobs = await repository.list_jobs(session)
        except (OSError, DBAPIError) as exc:  # a restart; the pool connects afresh next time
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
        except Exception:  # the controller's boundary (see the docstring)
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
