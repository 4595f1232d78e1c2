"""A would-be best becomes the job's best only once independent samples confirm it, and a
re-measure a crash interrupted is sent again when the job resumes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from codevolve.core.job import Job, JobState
from codevolve.core.measurement import Verdict
from codevolve.core.program import Program, ProgramStatus
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, upgrade
from codevolve.services.cli import main
from codevolve.services.controller.loop import Progress
from codevolve.services.read_models.report import build_report
from codevolve.services.read_models.views import job_status
from tests.unit.services.controller.remeasure_support import (
    LUCKY_FAILING,
    LUCKY_LOW,
    STEADY,
    LuckyFirstQueue,
    SeededProblem,
    run_seeded,
    seeded_config,
)

SAMPLES = 3


async def _programs(sessions: object, job_id: str) -> dict[str, Program]:
    async with sessions.begin() as session:  # type: ignore[attr-defined]
        programs = await repository.list_programs(session, job_id, limit=100, order="index")
    return {program.source: program for program in programs}


async def test_a_program_that_scores_high_only_on_its_first_inputs_never_becomes_the_best(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'run.sqlite'}")
    await upgrade(engine)
    sessions = session_factory(engine)
    config = seeded_config(max_proposals=3, remeasure_samples=SAMPLES)
    async with sessions.begin() as session:
        job = await repository.create_job(session, config)
    seen: list[float | None] = []

    def watch(progress: Progress) -> None:
        seen.append(progress.best_score)

    try:
        sources = [LUCKY_FAILING, LUCKY_LOW, STEADY]
        state, controller = await run_seeded(
            job, sessions, LuckyFirstQueue(), sources, on_progress=watch
        )
        programs = await _programs(sessions, job.id)
        async with sessions.begin() as session:
            stored = await repository.get_job(session, job.id)
            confirmed = await repository.confirmed_best(session, job.id)
            report = await build_report(session, job.id, SeededProblem())
            status = await job_status(session, job.id)
    finally:
        await engine.dispose()

    assert state is JobState.DONE
    failing, low, steady = programs[LUCKY_FAILING], programs[LUCKY_LOW], programs[STEADY]
    # Both lucky programs were picked at 9.0 and keep that as their own figures.
    assert (failing.status, failing.score) == (ProgramStatus.EVALUATED, 9.0)
    assert (low.status, low.score) == (ProgramStatus.EVALUATED, 9.0)
    assert 9.0 not in seen and seen[-1] == 2.0  # the progress shows only confirmed bests
    assert failing.remeasure is not None and failing.remeasure.verdict is Verdict.REFUTED
    assert "an input it was not tuned on" in (failing.remeasure.note or "")
    assert low.remeasure is not None and low.remeasure.verdict is Verdict.CONFIRMED
    assert low.remeasure.confirmed == 0.5 and low.remeasure.samples == (0.5,) * SAMPLES
    assert "winner's curse" in (low.remeasure.note or "")
    # The job's best is the best confirmed program, everywhere it is shown.
    assert confirmed is not None and confirmed.id == steady.id
    assert stored is not None and (stored.best_program_id, stored.best_score) == (steady.id, 2.0)
    assert controller.progress.best_score == 2.0
    assert controller.progress.remeasured == 4 * SAMPLES  # the seed and the three children
    for view in (report, status):
        assert (view["best_program_id"], view["best_score"]) == (steady.id, 2.0)
        assert view["best_picked_score"] == 2.0 and view["best_note"] is None
        assert view["best_spread"]["count"] == SAMPLES and view["best_spread_over"] == "samples"
        assert view["remeasured"] == {"confirmed": 3, "refuted": 1}
    # `codevolve best` prints the confirmed best's source, not a lucky pick's.
    db = str(tmp_path / "run.sqlite")
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["best", job.id, "--db", db]) == 0
    assert capsys.readouterr().out == STEADY


async def test_a_resumed_job_sends_the_re_measures_a_crash_interrupted(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'run.sqlite'}")
    await upgrade(engine)
    sessions = session_factory(engine)
    config = seeded_config(max_proposals=1, remeasure_samples=SAMPLES)
    async with sessions.begin() as session:
        job = await repository.create_job(session, config)
    try:
        # The controller dies with the child's re-measure in flight (its tasks die with it: an
        # embedded queue); nothing of it is in the database but the evaluated child.
        lost = LuckyFirstQueue(drop_remeasures_of=STEADY, samples=SAMPLES)
        state, _crashed = await run_seeded(job, sessions, lost, [STEADY], crash=lost.dropped)
        before = await _programs(sessions, job.id)
        async with sessions.begin() as session:
            interrupted = await repository.get_job(session, job.id)
        assert state is None and interrupted is not None
        assert interrupted.state is JobState.RUNNING and interrupted.best_score == 1.0
        assert before[STEADY].status is ProgramStatus.EVALUATED
        assert before[STEADY].remeasure is None

        resumed_state, resumed = await run_seeded(
            interrupted, sessions, LuckyFirstQueue(), [STEADY]
        )
        after = await _programs(sessions, job.id)
        async with sessions.begin() as session:
            stored = await repository.get_job(session, job.id)
    finally:
        await engine.dispose()

    assert resumed_state is JobState.DONE
    assert resumed.progress.evaluated == 0  # nothing was evaluated again...
    assert resumed.progress.remeasured == SAMPLES  # ...but the interrupted re-measure ran
    for source, program in before.items():
        again = after[source]
        assert (again.evaluated_at, again.attempts) == (program.evaluated_at, program.attempts)
        assert again.remeasure is not None and again.remeasure.verdict is Verdict.CONFIRMED
    assert isinstance(stored, Job) and stored.best_program_id == after[STEADY].id
    assert stored.best_score == 2.0
