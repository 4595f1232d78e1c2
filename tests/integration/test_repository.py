"""The repository on SQLite and Postgres: jobs, proposals, the program lifecycle, the guarded
result transition, dedupe, best cases and listings."""

from __future__ import annotations

import dataclasses
import math

import pytest
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.job import JobState, ProgramCounts
from codevolve.core.program import CaseResult, ProgramStatus
from codevolve.core.prompt import BestCase, ProposalStatus
from codevolve.program_db import repository
from codevolve.program_db.errors import UnknownJobError, UnknownProgramError
from tests.integration.conftest import evaluation_of, new_program, run_config

Sessions = async_sessionmaker[AsyncSession]


async def test_create_job_stores_its_config_and_islands_at_epoch_zero(sessions: Sessions) -> None:
    config = run_config(islands=3, seed=7)
    async with sessions.begin() as session:
        job = await repository.create_job(session, config, owner="alice")
        other = await repository.create_job(session, run_config(), owner="bob")
    async with sessions.begin() as session:
        stored = await repository.get_job(session, job.id)
        epochs = await repository.island_epochs(session, job.id)
        everyone = await repository.list_jobs(session)
        alices = await repository.list_jobs(session, owner="alice")
        missing = await repository.get_job(session, "no-such-job")
    assert stored is not None
    assert stored.config == config
    assert stored.state is JobState.QUEUED
    assert (stored.owner, stored.proposals, stored.wall_s) == ("alice", 0, 0.0)
    assert stored.created_at.tzinfo is not None
    assert epochs == {0: 0, 1: 0, 2: 0}
    assert {j.id for j in everyone} == {job.id, other.id}
    assert [j.id for j in alices] == [job.id]
    assert missing is None


async def test_job_state_error_and_wall_time_are_kept(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        await repository.set_job_state(session, job.id, JobState.FAILED, error="boom")
        await repository.add_job_wall(session, job.id, 1.5)
        await repository.add_job_wall(session, job.id, 2.25)
    async with sessions.begin() as session:
        failed = await repository.get_job(session, job.id)
        await repository.set_job_state(session, job.id, JobState.RUNNING)
        resumed = await repository.get_job(session, job.id)
    assert failed is not None and resumed is not None
    assert (failed.state, failed.error, failed.wall_s) == (JobState.FAILED, "boom", 3.75)
    assert (resumed.state, resumed.error) == (JobState.RUNNING, None)


async def test_changing_an_unknown_job_raises(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        with pytest.raises(UnknownJobError):
            await repository.set_job_state(session, "no-such-job", JobState.DONE)


async def test_proposals_are_counted_once_per_index(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        assert await repository.proposal_stats(session, job.id) == (0, 0)
        statuses = [ProposalStatus.CHILD, ProposalStatus.APPLY_FAILED, ProposalStatus.CHILD]
        for index, status in enumerate(statuses):
            recorded = await repository.record_proposal(
                session, job_id=job.id, index=index, parent_id=None, island=index % 2,
                proposer="simulated:x", status=status, tokens_in=10, cost_usd=0.01,
            )  # fmt: skip
            assert recorded
        again = await repository.record_proposal(
            session, job_id=job.id, index=1, parent_id=None, island=1, proposer="simulated:x",
            status=ProposalStatus.PROPOSER_FAILED, reason="internal error",
        )  # fmt: skip
    async with sessions.begin() as session:
        stats = await repository.proposal_stats(session, job.id)
        counts = await repository.proposal_counts(session, job.id)
        stored = await repository.get_job(session, job.id)
    assert not again
    assert stats == (3, 3)
    assert counts == {ProposalStatus.CHILD: 2, ProposalStatus.APPLY_FAILED: 1}
    assert stored is not None and stored.proposals == 3


async def test_next_proposal_index_follows_the_highest_recorded(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        for index in (0, 5):
            await repository.record_proposal(
                session, job_id=job.id, index=index, parent_id=None, island=0, proposer="p",
                status=ProposalStatus.DUPLICATE,
            )  # fmt: skip
        assert await repository.proposal_stats(session, job.id) == (2, 6)


async def test_program_goes_from_pending_to_evaluated_with_its_results(
    sessions: Sessions,
) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        seed = new_program(job.id, proposal_index=-1)
        await repository.insert_program(session, seed)
    async with sessions.begin() as session:
        assert [p.id for p in await repository.pending_programs(session, job.id)] == [seed.id]
        assert await repository.mark_enqueued(session, seed.id) == 1
        assert await repository.mark_enqueued(session, seed.id) == 2
        cases = (CaseResult("m16", 3.0, "16x4096"), CaseResult("m32", 5.0))
        applied = await repository.apply_evaluation(
            session, evaluation_of(seed, 1.25, cases=cases), cell=(1, 3)
        )
    async with sessions.begin() as session:
        stored = await repository.get_program(session, seed.id)
        pending = await repository.pending_programs(session, job.id)
        counts = await repository.program_counts(session, job.id)
    assert applied
    assert stored is not None
    assert (stored.status, stored.score, stored.attempts) == (ProgramStatus.EVALUATED, 1.25, 2)
    assert stored.cell == (1, 3)
    assert stored.stage_scores == {"check": 1.0, "score": 1.25}
    assert stored.metrics == {"valid": 1.0, "speedup": 1.25}
    assert stored.heldout == {"score": 0.625}
    assert stored.features == {"size": 0.25, "speed": 0.75}
    assert stored.cases == cases
    assert stored.artifacts == {"stderr": "warning: x"}
    assert (stored.feedback, stored.error) == ("ok", None)
    assert stored.evaluated_at is not None and stored.created_at is not None
    assert stored.source == seed.source and stored.proposal_index == -1
    assert pending == []
    assert counts == ProgramCounts(evaluated=1)


async def test_a_second_delivery_of_a_result_changes_nothing(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        program = new_program(job.id)
        await repository.insert_program(session, program)
    async with sessions.begin() as session:
        first = await repository.apply_evaluation(session, evaluation_of(program, 2.0), cell=(0, 0))
    async with sessions.begin() as session:
        before = await repository.get_program(session, program.id)
        second = await repository.apply_evaluation(
            session, evaluation_of(program, 9.0, status=ProgramStatus.FAILED), cell=(4, 4)
        )
        failed = await repository.mark_failed(session, program.id, "dead letter")
        after = await repository.get_program(session, program.id)
    assert (first, second, failed) == (True, False, False)
    assert after == before
    assert after is not None and (after.score, after.cell) == (2.0, (0, 0))


async def test_mark_failed_fails_a_pending_program_once(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        program = new_program(job.id)
        await repository.insert_program(session, program)
        first = await repository.mark_failed(session, program.id, "3 deliveries")
        second = await repository.mark_failed(session, program.id, "again")
        late = await repository.apply_evaluation(session, evaluation_of(program, 1.0), cell=None)
        stored = await repository.get_program(session, program.id)
    assert (first, second, late) == (True, False, False)
    assert stored is not None
    assert (stored.status, stored.error, stored.score) == (
        ProgramStatus.FAILED,
        "3 deliveries",
        None,
    )


async def test_enqueueing_an_unknown_program_raises(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        with pytest.raises(UnknownProgramError):
            await repository.mark_enqueued(session, "no-such-program")


async def test_content_hash_finds_a_duplicate_within_its_job_only(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        other = await repository.create_job(session, run_config())
        program = new_program(job.id, name="same")
        await repository.insert_program(session, program)
        found = await repository.find_program_by_hash(session, job.id, program.content_hash)
        elsewhere = await repository.find_program_by_hash(session, other.id, program.content_hash)
        await repository.insert_program(session, new_program(other.id, name="same"))
    assert (found, elsewhere) == (program.id, None)
    with pytest.raises(IntegrityError):
        async with sessions.begin() as session:
            await repository.insert_program(session, new_program(job.id, name="same"))


async def test_best_program_and_job_best_follow_the_highest_score(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        programs = [new_program(job.id, proposal_index=i) for i in range(4)]
        for program in programs:
            await repository.insert_program(session, program)
        results = [(1.0, ProgramStatus.EVALUATED), (3.0, ProgramStatus.EVALUATED),
                   (None, ProgramStatus.REJECTED), (2.0, ProgramStatus.EVALUATED)]  # fmt: skip
        for program, (score, status) in zip(programs, results, strict=True):
            await repository.apply_evaluation(
                session, evaluation_of(program, score, status=status), cell=(0,)
            )
        await repository.update_job_best(session, job.id)
    async with sessions.begin() as session:
        best = await repository.best_program(session, job.id)
        stored = await repository.get_job(session, job.id)
        history = await repository.score_history(session, job.id)
        counts = await repository.program_counts(session, job.id)
    assert best is not None and best.id == programs[1].id
    assert stored is not None and (stored.best_program_id, stored.best_score) == (best.id, 3.0)
    assert history == [(0, 1.0), (1, 3.0), (3, 2.0)]
    assert counts == ProgramCounts(evaluated=3, rejected=1)


async def test_a_job_without_results_has_no_best_program(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        await repository.insert_program(session, new_program(job.id))
        await repository.update_job_best(session, job.id)
        assert await repository.best_program(session, job.id) is None
        stored = await repository.get_job(session, job.id)
    assert stored is not None and stored.best_program_id is None


async def test_list_programs_filters_orders_and_pages(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        programs = [new_program(job.id, island=i % 2, proposal_index=i) for i in range(6)]
        for program in programs:
            await repository.insert_program(session, program)
        for i in (0, 1, 2, 3):  # 4 and 5 stay pending
            await repository.apply_evaluation(session, evaluation_of(programs[i], i), cell=(0,))
    async with sessions.begin() as session:
        by_score = await repository.list_programs(session, job.id)
        page = await repository.list_programs(session, job.id, limit=2, offset=1)
        island_one = await repository.list_programs(session, job.id, island=1, order="index")
        pending = await repository.list_programs(session, job.id, status=ProgramStatus.PENDING)
        newest = await repository.list_programs(session, job.id, order="newest", limit=1)
        pages = [
            [p.id for p in await repository.list_programs(session, job.id, limit=n, offset=o)]
            for n, o in ((3, 3), (2, 4), (5, 5), (5, 9))
        ]
    ids = [p.id for p in programs]
    assert [p.id for p in by_score] == [ids[3], ids[2], ids[1], ids[0], ids[4], ids[5]]
    assert [p.id for p in page] == [ids[2], ids[1]]
    assert pages == [[ids[0], ids[4], ids[5]], [ids[4], ids[5]], [ids[5]], []]  # past the scored
    assert [p.id for p in island_one] == [ids[1], ids[3], ids[5]]
    assert [p.id for p in pending] == [ids[4], ids[5]]
    assert len(newest) == 1


async def test_get_programs_keeps_the_order_asked_for(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        programs = [new_program(job.id) for _ in range(3)]
        for program in programs:
            await repository.insert_program(session, program)
        wanted = [programs[2].id, programs[0].id, "unknown", programs[1].id]
        got = await repository.get_programs(session, wanted)
    assert [p.id for p in got] == [programs[2].id, programs[0].id, programs[1].id]


async def test_best_cases_keep_the_lowest_cost_per_case(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        first, second = new_program(job.id), new_program(job.id)
        await repository.insert_program(session, first)
        await repository.insert_program(session, second)
        await repository.upsert_best_cases(session, job.id, first.id, [
            CaseResult("a", 5.0, "a1"), CaseResult("a", 4.0, "a2"), CaseResult("b", 2.0, "b1"),
        ])  # fmt: skip
        await repository.upsert_best_cases(session, job.id, second.id, [
            CaseResult("a", 4.5), CaseResult("b", 1.0, "b2"), CaseResult("c", 7.0, "c2"),
            CaseResult("d", math.nan),
        ])  # fmt: skip
        await repository.upsert_best_cases(session, job.id, second.id, [])
        best = await repository.best_cases(session, job.id)
    assert {k: (v.cost, v.detail, v.program_id) for k, v in best.items()} == {
        "a": (4.0, "a2", first.id),
        "b": (1.0, "b2", second.id),
        "c": (7.0, "c2", second.id),
    }


async def test_non_finite_numbers_survive_and_a_nan_score_ranks_nowhere(
    sessions: Sessions,
) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        program = new_program(job.id)
        await repository.insert_program(session, program)
        evaluation = evaluation_of(
            program, math.nan, metrics={"speedup": math.inf, "loss": -math.inf}
        )
        await repository.apply_evaluation(session, evaluation, cell=(0,))
        stored = await repository.get_program(session, program.id)
        best = await repository.best_program(session, job.id)
    assert stored is not None
    assert stored.score is None and best is None
    assert stored.metrics["speedup"] == math.inf and stored.metrics["loss"] == -math.inf
    assert math.isnan(stored.stage_scores["score"])


# --------------------------------------------------------------------- batches (the controller's)


async def test_a_batch_of_programs_is_inserted_once_per_content(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        first = new_program(job.id, name="a", proposal_index=0)
        await repository.insert_program(session, first)
    again = dataclasses.replace(first, id="x" * 32, proposal_index=1)  # the same code again
    fresh = [new_program(job.id, name=name, proposal_index=i) for i, name in enumerate("bc", 2)]
    twin = new_program(job.id, name="b", proposal_index=4)  # same code as one in the batch
    async with sessions.begin() as session:
        inserted = await repository.insert_programs(session, [again, *fresh, twin])
        counts = await repository.program_counts(session, job.id)
    assert inserted == {fresh[0].id, fresh[1].id}
    assert counts == ProgramCounts(pending=3)


async def test_a_batch_of_proposals_counts_each_index_once(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())

    def entry(index: int) -> repository.ProposalEntry:
        return repository.ProposalEntry(
            index=index, parent_id=None, island=0, proposer="p", status=ProposalStatus.CHILD
        )

    async with sessions.begin() as session:
        first = await repository.record_proposals(session, job.id, [entry(0), entry(1)])
    async with sessions.begin() as session:
        second = await repository.record_proposals(session, job.id, [entry(1), entry(2)])
        stored = await repository.get_job(session, job.id)
        stats = await repository.proposal_stats(session, job.id)
    assert (first, second) == (2, 1)
    assert stored is not None and stored.proposals == 3
    assert stats == (3, 3)


async def test_a_batch_of_results_is_applied_once_per_pending_program(
    sessions: Sessions,
) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        programs = [new_program(job.id, proposal_index=i) for i in range(4)]
        for program in programs:
            await repository.insert_program(session, program)
        await repository.apply_evaluation(session, evaluation_of(programs[3], 7.0), cell=(0, 0))
    batch = [
        (evaluation_of(programs[0], 1.5), (1, 2)),
        (evaluation_of(programs[1], None, status=ProgramStatus.FAILED), None),
        (evaluation_of(programs[0], 9.0), (3, 3)),  # a duplicate delivery in the same batch
        (evaluation_of(programs[3], 8.0), (4, 4)),  # no longer pending
    ]
    async with sessions.begin() as session:
        applied = await repository.apply_evaluations(session, batch)
    async with sessions.begin() as session:
        stored = {p.id: p for p in await repository.get_programs(session, [p.id for p in programs])}
        counts = await repository.program_counts(session, job.id)
    assert applied == {programs[0].id, programs[1].id}
    assert (stored[programs[0].id].score, stored[programs[0].id].cell) == (1.5, (1, 2))
    assert stored[programs[0].id].metrics == {"valid": 1.0, "speedup": 1.5}
    assert stored[programs[1].id].status is ProgramStatus.FAILED
    assert (stored[programs[3].id].score, stored[programs[3].id].cell) == (7.0, (0, 0))
    assert counts == ProgramCounts(pending=1, evaluated=2, failed=1)
    async with sessions.begin() as session:  # a second delivery of the whole batch: nothing
        assert await repository.apply_evaluations(session, batch) == set()


async def test_best_cases_of_many_programs_keep_the_lowest_per_case(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        a, b = new_program(job.id, proposal_index=0), new_program(job.id, proposal_index=1)
        await repository.insert_programs(session, [a, b])
        await repository.record_best_cases(
            session,
            job.id,
            [
                BestCase("m1", 5.0, "", a.id),
                BestCase("m1", 4.0, "b", b.id),
                BestCase("m2", 2.0, "a", a.id),
                BestCase("m2", math.nan, "", b.id),
            ],
        )
        await repository.record_best_cases(session, job.id, [BestCase("m2", 3.0, "", b.id)])
        best = await repository.best_cases(session, job.id)
    assert best == {
        "m1": BestCase("m1", 4.0, "b", b.id),
        "m2": BestCase("m2", 2.0, "a", a.id),
    }
