"""Composition of the embedded default: one process, SQLite (or any URL), in-process workers.

This is the only place (with the CLI) that creates the engine, the queue, the sandbox pool and the
proposer for a run; everything is closed when the run ends, also on errors and cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from codevolve.core.config import RunConfig
from codevolve.core.errors import ConfigError
from codevolve.core.job import Job, JobState
from codevolve.core.problem import Problem
from codevolve.evaluator_workers.gpu.pinning import embedded_gpus, open_devices, worker_slots
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import run_worker
from codevolve.problems.registry import get_problem
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, upgrade
from codevolve.proposers.base import Proposer
from codevolve.proposers.simulated import SimulatedProposer
from codevolve.services.bundles import is_bundle_name, prepare_problem, resolve_loaded
from codevolve.services.controller import Controller, Progress
from codevolve.services.report import build_report


@dataclass(frozen=True, slots=True)
class RunResult:
    job_id: str
    state: JobState
    report: dict[str, Any]


GC_THRESHOLD = 20_000  # allocations between collections of the youngest generation (default 700)


@functools.cache
def cached_problem(name: str) -> Problem:
    """Problems are immutable and some precompute tables: build each once per process.

    A bundle (``bundle:<sha256>``) resolves to the problem this process loaded for its job."""
    if is_bundle_name(name):
        return resolve_loaded(name)
    return get_problem(name)


def tune_gc() -> None:
    """Garbage collection for a long-lived controller process: what is alive at start (modules,
    problem tables) moves out of the collector's sight, and the youngest generation is collected
    every 20,000 allocations instead of 700. A busy controller allocates a few hundred objects per
    program, nearly all freed by reference counting; collecting them costs it several percent of
    its CPU at the default."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 50, 100)


def make_proposer(config: RunConfig, problem: Problem) -> Proposer:
    """The simulated proposer; an LLM proposer holds an HTTP client: use :func:`open_proposer`."""
    if config.proposer.kind != "simulated":
        raise ConfigError(f"proposer {config.proposer.kind!r} needs open_proposer()")
    return SimulatedProposer(problem.mutations(), domain_weight=config.proposer.domain_weight)


@contextlib.asynccontextmanager
async def open_proposer(config: RunConfig, problem: Problem) -> AsyncIterator[Proposer]:
    """The run's proposer, with whatever it holds (an HTTP client) closed when the run ends."""
    if config.proposer.kind == "llm":
        from codevolve.services.llm_runtime import open_llm_proposer

        async with open_llm_proposer(config) as llm:
            yield llm
    else:
        yield make_proposer(config, problem)


async def run_embedded(
    *,
    db_url: str,
    config: RunConfig | None = None,
    resume: str | None = None,
    workers: int = 2,
    gpus: str | None = None,
    proposal_processes: int = 0,
    on_start: Callable[[Job], None] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> RunResult:
    """Create (``config``) or resume (``resume`` = job id) a job and run it to its end here."""
    engine = create_engine(db_url)
    try:
        await upgrade(engine)
        sessions = session_factory(engine)
        async with sessions.begin() as session:
            job = await _create_or_load(session, config=config, resume=resume)
        problem = cached_problem(job.config.problem)
        if on_start is not None:
            on_start(job)
        queue = LocalQueue()
        stop = asyncio.Event()
        # One worker per GPU when the problem has GPU stages and a GPU is here (or --gpus).
        devices = open_devices(embedded_gpus(problem.stages, gpus))
        with SandboxPool(size=workers) as pool, contextlib.ExitStack() as held:
            for opened in devices:
                held.enter_context(opened)
            async with asyncio.TaskGroup() as tg:
                for name, loops, device in worker_slots(workers, devices):
                    tg.create_task(
                        run_worker(
                            queue,
                            resolve_problem=cached_problem,
                            pool=pool,
                            concurrency=loops,
                            name=name,
                            stop=stop,
                            device=device,
                        )
                    )
                try:
                    async with open_proposer(job.config, problem) as proposer:
                        controller = Controller(
                            job,
                            sessions=sessions,
                            queue=queue,
                            problem=problem,
                            proposer=proposer,
                            on_progress=on_progress,
                            proposal_processes=proposal_processes,
                        )
                        state = await controller.run()
                finally:
                    stop.set()
        async with sessions.begin() as session:
            report = await build_report(session, job.id, problem)
        return RunResult(job_id=job.id, state=state, report=report)
    finally:
        await engine.dispose()


async def _create_or_load(session: Any, *, config: RunConfig | None, resume: str | None) -> Job:
    if resume is None:
        if config is None:
            raise ConfigError("either a config or a job id to resume is needed")
        await prepare_problem(session, config.problem)  # fail early; a bundle is stored
        return await repository.create_job(session, config)
    job = await repository.get_job(session, resume)
    if job is None:
        raise ConfigError(f"--resume: no job {resume!r} in this database")
    if job.state is JobState.CANCELLED:
        raise ConfigError(f"--resume: job {resume} was cancelled")
    await prepare_problem(session, job.config.problem)  # a bundle is read back
    return job
