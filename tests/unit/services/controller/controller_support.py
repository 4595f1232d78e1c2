"""Run one gemm-tiling job through a real Controller, a worker loop and a given queue (SQLite)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from codevolve.core.config import RunConfig
from codevolve.core.job import JobState, ProgramCounts
from codevolve.core.problem import Problem
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import run_worker
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, upgrade
from codevolve.services.controller.loop import Controller
from codevolve.services.runtime.embedded import make_proposer
from codevolve.services.runtime.problems import cached_problem

RUN_TIMEOUT_S = 60.0  # a run that hangs (a leaked slot) fails here instead of forever


async def run_job(
    tmp_path: Path,
    queue: LocalQueue,
    config: RunConfig,
    *,
    proposal_processes: int = 0,
    problem: Problem | None = None,
) -> tuple[JobState, ProgramCounts, Controller]:
    """Run the job to its end with one worker loop; returns its state, program counts and the
    controller (for its progress counters and its job's id). ``problem`` stands in for the
    config's problem in the controller (the worker evaluates the config's)."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'run.sqlite'}")
    await upgrade(engine)
    sessions = session_factory(engine)
    async with sessions.begin() as session:
        job = await repository.create_job(session, config)
    problem = problem or cached_problem(config.problem)
    stop = asyncio.Event()
    try:
        with SandboxPool(size=1) as pool:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(
                    run_worker(
                        queue,
                        resolve_problem=cached_problem,
                        pool=pool,
                        concurrency=1,
                        name="w",
                        stop=stop,
                    )
                )
                controller = Controller(
                    job,
                    sessions=sessions,
                    queue=queue,
                    problem=problem,
                    proposer=make_proposer(config, problem),
                    proposal_processes=proposal_processes,
                )
                try:
                    state = await asyncio.wait_for(controller.run(), timeout=RUN_TIMEOUT_S)
                finally:
                    stop.set()
        async with sessions.begin() as session:
            counts = await repository.program_counts(session, job.id)
    finally:
        await engine.dispose()
    return state, counts, controller
