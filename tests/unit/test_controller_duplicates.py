"""A result delivered twice in one batch (a task resent after Redis lost its data, whose first
delivery was still published) is applied once and frees its proposal slot once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from codevolve.core.config import RunConfig
from codevolve.core.program import Evaluation
from codevolve.core.task import Task
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import run_worker
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, upgrade
from codevolve.services.controller import Controller
from codevolve.services.runtime import cached_problem, make_proposer


class TwiceQueue(LocalQueue):
    """Every result arrives twice, back to back: both land in the controller's next batch."""

    async def complete(self, task: Task, evaluation: Evaluation) -> None:
        await super().complete(task, evaluation)
        await super().complete(task, evaluation)


async def test_a_result_twice_in_one_batch_is_applied_once_and_the_run_ends(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'run.sqlite'}")
    await upgrade(engine)
    sessions = session_factory(engine)
    config = RunConfig(problem="gemm-tiling", seed=5, max_proposals=12, max_in_flight=3)
    async with sessions.begin() as session:
        job = await repository.create_job(session, config)
    problem = cached_problem(config.problem)
    queue, stop = TwiceQueue(), asyncio.Event()
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
    assert counts.pending == 0
    done = controller.progress.evaluated + controller.progress.rejected
    assert done + controller.progress.failed == counts.evaluated + counts.rejected + counts.failed
