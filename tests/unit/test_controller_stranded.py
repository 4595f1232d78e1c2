"""A child inserted but never queued (its proposal broke in between) is still evaluated."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from codevolve.core.config import RunConfig
from codevolve.core.task import Task
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import run_worker
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, upgrade
from codevolve.services.controller import Controller
from codevolve.services.runtime import cached_problem, make_proposer


class FlakyQueue(LocalQueue):
    """Loses the connection once: the third submission (one task or a batch) raises."""

    def __init__(self) -> None:
        super().__init__()
        self.submitted = 0

    async def submit(self, task: Task) -> None:
        self.submitted += 1
        if self.submitted == 3:
            raise ConnectionResetError("the queue went away")
        await super().submit(task)

    async def submit_many(self, tasks: Sequence[Task]) -> None:
        self.submitted += 1
        if self.submitted == 3:
            raise ConnectionResetError("the queue went away")
        await super().submit_many(tasks)


async def test_a_child_whose_task_was_lost_is_sent_before_the_run_ends(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'run.sqlite'}")
    await upgrade(engine)
    sessions = session_factory(engine)
    config = RunConfig(problem="gemm-tiling", seed=3, max_proposals=10, max_in_flight=2)
    async with sessions.begin() as session:
        job = await repository.create_job(session, config)
    problem = cached_problem(config.problem)
    queue, stop = FlakyQueue(), asyncio.Event()
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
                )
                try:
                    state = await asyncio.wait_for(controller.run(), timeout=60)
                finally:
                    stop.set()
        async with sessions.begin() as session:
            counts = await repository.program_counts(session, job.id)
    finally:
        await engine.dispose()
    assert state.value == "done"
    assert queue.submitted >= 4  # the lost task was sent again
    assert counts.pending == 0
