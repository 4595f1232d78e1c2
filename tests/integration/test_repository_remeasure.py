"""Re-measures in the program database: recorded once beside the program's own figures, the
would-be bests still waiting for one, and the job's confirmed best."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.measurement import Remeasure, Verdict
from codevolve.core.program import Program, ProgramStatus
from codevolve.program_db import repository
from tests.integration.conftest import evaluation_of, new_program, run_config

Sessions = async_sessionmaker[AsyncSession]


def _confirmed(picked: float, confirmed: float) -> Remeasure:
    return Remeasure(Verdict.CONFIRMED, picked, (confirmed,), confirmed, None)


async def _evaluated(sessions: Sessions, scores: list[float | None]) -> tuple[str, list[Program]]:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        programs = [new_program(job.id, proposal_index=i) for i in range(len(scores))]
        for program, score in zip(programs, scores, strict=True):
            await repository.insert_program(session, program)
            status = ProgramStatus.EVALUATED if score is not None else ProgramStatus.REJECTED
            evaluation = evaluation_of(program, score, status=status)
            await repository.apply_evaluation(session, evaluation, cell=(0,))
    return job.id, programs


async def test_a_re_measure_is_recorded_once_and_leaves_the_programs_figures(
    sessions: Sessions,
) -> None:
    job_id, (program,) = await _evaluated(sessions, [3.0])
    refuted = Remeasure(Verdict.REFUTED, 3.0, (2.9,), None, "re-measure sample 2 of 2 failed: x")
    async with sessions.begin() as session:
        assert await repository.record_remeasure(session, program.id, refuted)
        assert not await repository.record_remeasure(session, program.id, _confirmed(3.0, 3.0))
    async with sessions.begin() as session:
        stored = await repository.get_program(session, program.id)
        figures = await repository.job_figures(session, job_id, program.id)
    assert stored is not None and stored.remeasure == refuted
    assert (stored.status, stored.score) == (ProgramStatus.EVALUATED, 3.0)
    assert figures.remeasured == {Verdict.REFUTED: 1}
    assert (figures.best_picked_score, figures.best_remeasure) == (3.0, refuted)
    assert figures.programs.evaluated == 1


async def test_would_be_bests_are_the_unmeasured_programs_above_the_confirmed_best(
    sessions: Sessions,
) -> None:
    job_id, programs = await _evaluated(sessions, [1.0, 4.0, None, 3.0, 2.0, 5.0])
    async with sessions.begin() as session:
        await repository.record_remeasure(session, programs[5].id, _confirmed(5.0, 1.5))
        waiting = await repository.remeasure_candidates(
            session, job_id, above=1.5, exclude=[programs[1].id], limit=10
        )
        first = await repository.remeasure_candidates(session, job_id, above=None, limit=1)
    assert [p.id for p in waiting] == [programs[3].id, programs[4].id]  # best first
    assert [p.id for p in first] == [programs[1].id]


async def test_the_confirmed_best_is_chosen_by_confirmed_figures_not_picked_ones(
    sessions: Sessions,
) -> None:
    job_id, programs = await _evaluated(sessions, [2.0, 9.0, 1.0])
    async with sessions.begin() as session:
        assert await repository.confirmed_best(session, job_id) is None
        await repository.record_remeasure(session, programs[0].id, _confirmed(2.0, 1.9))
        await repository.record_remeasure(session, programs[1].id, _confirmed(9.0, 0.5))
        await repository.record_remeasure(session, programs[2].id, _confirmed(1.0, 1.0))
        best = await repository.confirmed_best(session, job_id)
        figures = await repository.job_figures(session, job_id, None)
    assert best is not None and best.id == programs[0].id
    assert best.remeasure is not None and best.remeasure.confirmed == 1.9
    assert figures.remeasured == {Verdict.CONFIRMED: 3}
    assert (figures.best_picked_score, figures.best_remeasure) == (None, None)


async def test_a_job_read_with_its_figures_matches_it_and_its_figures_read_apart(
    sessions: Sessions,
) -> None:
    job_id, programs = await _evaluated(sessions, [2.0, None, 4.0])
    async with sessions.begin() as session:
        await repository.record_remeasure(session, programs[2].id, _confirmed(4.0, 3.5))
        await repository.set_job_best(session, job_id, programs[2].id, 3.5)
        empty = await repository.create_job(session, run_config())
    async with sessions() as session:
        together = await repository.job_with_figures(session, job_id)
        job = await repository.get_job(session, job_id)
        assert job is not None
        apart = await repository.job_figures(session, job_id, job.best_program_id)
        nothing = await repository.job_with_figures(session, empty.id)
        unknown = await repository.job_with_figures(session, "0" * 32)
    assert together == (job, apart)
    assert apart.best_picked_score == 4.0 and apart.remeasured == {Verdict.CONFIRMED: 1}
    assert (apart.programs.evaluated, apart.programs.rejected) == (2, 1)
    assert nothing is not None and nothing[0] == empty and nothing[1].programs.total == 0
    assert nothing[1].best_remeasure is None and unknown is None
