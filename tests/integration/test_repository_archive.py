"""The stored archive: the conditional elite upsert, sampling, migration and island resets.

Both backends for the behaviour; a state machine (SQLite) for the invariants; real Postgres for
races between transactions.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import event, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from codevolve.core.program import CellKey, Program
from codevolve.program_db import repository
from codevolve.program_db.archive import AddOutcome, EliteRef, by_rank
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.program_db.mirror import ArchiveMirror
from codevolve.program_db.models import EliteRow, ProgramRow
from tests.integration.conftest import evaluation_of, new_program, run_config

Sessions = async_sessionmaker[AsyncSession]


async def _programs(session: AsyncSession, job_id: str, count: int) -> list[Program]:
    programs = [new_program(job_id, proposal_index=i) for i in range(count)]
    for program in programs:
        await repository.insert_program(session, program)
    return programs


async def _all_elites(session: AsyncSession, job_id: str) -> list[tuple[int, CellKey, str, float]]:
    rows = await session.execute(
        select(EliteRow.island, EliteRow.cell, EliteRow.program_id, EliteRow.score)
        .where(EliteRow.job_id == job_id)
        .order_by(EliteRow.island, EliteRow.cell)
    )
    return [
        (island, tuple(int(i) for i in cell.split(",")), program_id, score)
        for island, cell, program_id, score in rows
    ]


@contextmanager
def statements_on(engine: AsyncEngine) -> Iterator[list[str]]:
    """Every SQL statement the engine sends while the block runs."""
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(str(args[2]))

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


# ------------------------------------------------------------------------------------ add_elite


async def test_add_elite_inserts_replaces_only_when_strictly_better_and_refuses_stale(
    sessions: Sessions,
) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        a, b, c, d = await _programs(session, job.id, 4)

        async def offer(program: Program, score: float, epoch: int = 0) -> AddOutcome:
            return await repository.add_elite(
                session, job_id=job.id, island=0, cell=(2, 1), program_id=program.id,
                score=score, epoch=epoch,
            )  # fmt: skip

        outcomes = [
            await offer(a, 1.0),
            await offer(b, 1.0),  # a tie keeps the incumbent
            await offer(c, 0.5),
            await offer(d, 2.0),
            await offer(c, 9.0, epoch=1),  # island 0 is at epoch 0
            await offer(c, float("nan")),
        ]
        elites = await repository.island_elites(session, job.id, 0)
        other_island = await repository.island_elites(session, job.id, 1)
    assert outcomes == [
        AddOutcome.NEW, AddOutcome.NOT_ADDED, AddOutcome.NOT_ADDED, AddOutcome.IMPROVED,
        AddOutcome.STALE, AddOutcome.NOT_ADDED,
    ]  # fmt: skip
    assert elites == [EliteRef(cell=(2, 1), program_id=d.id, score=2.0)]
    assert other_island == []


async def test_island_elites_are_listed_best_first(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        programs = await _programs(session, job.id, 3)
        for cell, program, score in zip([(0,), (1,), (2,)], programs, [1.0, 3.0, 2.0], strict=True):
            await repository.add_elite(
                session, job_id=job.id, island=1, cell=cell, program_id=program.id,
                score=score, epoch=0,
            )  # fmt: skip
        elites = await repository.island_elites(session, job.id, 1)
    assert [e.score for e in elites] == [3.0, 2.0, 1.0]
    assert [e.cell for e in elites] == [(1,), (2,), (0,)]


# ------------------------------------------------------------------------------------- sampling


async def test_sample_is_none_until_the_island_has_an_elite(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        await _programs(session, job.id, 2)  # programs alone are not elites
        sample = await repository.sample(
            session, job.id, 0, np.random.default_rng(0), exploit_ratio=0.5, temperature=1.0,
            top=1, diverse=1,
        )  # fmt: skip
    assert sample is None


async def test_sample_returns_a_parent_inspirations_and_the_epoch(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
        programs = await _programs(session, job.id, 5)
        for i, program in enumerate(programs):
            await repository.add_elite(
                session, job_id=job.id, island=0, cell=(i,), program_id=program.id,
                score=float(i), epoch=0,
            )  # fmt: skip
    rng = np.random.default_rng(3)
    async with sessions.begin() as session:
        sample = await repository.sample(
            session, job.id, 0, rng, exploit_ratio=0.7, temperature=2.0, top=2, diverse=1
        )
    assert sample is not None
    ids = {p.id for p in programs}
    chosen = [sample.parent.id, *(p.id for p in sample.inspirations)]
    assert set(chosen) <= ids and len(set(chosen)) == 4
    others_best_first = [p.id for p in reversed(programs) if p.id != sample.parent.id]
    assert [p.id for p in sample.inspirations[:2]] == others_best_first[:2]
    assert sample.epoch == 0


@pytest.mark.parametrize("population", [5_000])
async def test_sampling_reads_elites_and_the_chosen_programs_only(
    sessions: Sessions, engine: AsyncEngine, population: int
) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config(islands=1))
        rows = [
            {"id": f"p{i:06d}", "job_id": job.id, "source": f"x = {i}\n", "content_hash": f"h{i}",
             "island": 0, "generation": 1, "proposal_index": i, "status": "evaluated",
             "score": i / population}
            for i in range(population)
        ]  # fmt: skip
        await session.execute(insert(ProgramRow), rows)
        for cell in range(100):  # the elites: every 50th program
            await repository.add_elite(
                session, job_id=job.id, island=0, cell=(cell // 10, cell % 10),
                program_id=f"p{cell * 50:06d}", score=cell * 50 / population, epoch=0,
            )  # fmt: skip
    rng = np.random.default_rng(0)
    async with sessions.begin() as session:
        with statements_on(engine) as statements:
            started = time.perf_counter()
            for _ in range(20):
                sample = await repository.sample(
                    session, job.id, 0, rng, exploit_ratio=0.7, temperature=4.0, top=2,
                    diverse=1,
                )  # fmt: skip
                assert sample is not None and len(sample.inspirations) == 3
            per_sample = (time.perf_counter() - started) / 20
    assert len(statements) == 2 * 20  # the island's epoch joined with its elites; the programs
    touching_programs = [s for s in statements if "FROM programs" in s]
    assert len(touching_programs) == 20
    assert all("programs.id IN" in s for s in touching_programs)
    assert per_sample < 0.1  # seconds; measured ~3 ms


# ------------------------------------------------------------------------------------ migration


async def test_migration_sends_each_islands_best_to_the_next_island(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config(islands=3))
        programs = await _programs(session, job.id, 6)
        for i, program in enumerate(programs):  # island i % 3 holds scores i and i + 3
            await repository.add_elite(
                session, job_id=job.id, island=i % 3, cell=(i,), program_id=program.id,
                score=float(i), epoch=0,
            )  # fmt: skip
        first = await repository.migrate(session, job.id, migrants=1)
        after_first = [await repository.island_elites(session, job.id, i) for i in range(3)]
        second = await repository.migrate(session, job.id, migrants=1)
        after_second = [await repository.island_elites(session, job.id, i) for i in range(3)]
    ids = [p.id for p in programs]
    assert first == 3  # 3 -> island 1, 4 -> island 2, 5 -> island 0
    assert [{e.program_id for e in elites} for elites in after_first] == [
        {ids[0], ids[3], ids[5]}, {ids[1], ids[4], ids[3]}, {ids[2], ids[5], ids[4]},
    ]  # fmt: skip
    assert EliteRef(cell=(3,), program_id=ids[3], score=3.0) in after_first[1]
    # Island 0's best is now 5, which island 1 lacks; the others' bests are already next door.
    assert second == 1
    assert {e.program_id for e in after_second[1]} == {ids[1], ids[4], ids[3], ids[5]}
    assert after_second[0] == after_first[0] and after_second[2] == after_first[2]


async def test_migration_skips_a_cell_holding_a_better_elite(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config(islands=2))
        weak, strong = await _programs(session, job.id, 2)
        for island, program, score in ((0, weak, 1.0), (1, strong, 5.0)):
            await repository.add_elite(
                session, job_id=job.id, island=island, cell=(0,), program_id=program.id,
                score=score, epoch=0,
            )  # fmt: skip
        written = await repository.migrate(session, job.id, migrants=2)
        elites = await _all_elites(session, job.id)
    assert written == 1  # strong replaced weak in island 0; weak did not displace strong
    assert elites == [(0, (0,), strong.id, 5.0), (1, (0,), strong.id, 5.0)]


# --------------------------------------------------------------------------------------- resets


async def test_reset_restarts_the_worse_half_from_a_survivors_best(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config(islands=4))
        programs = await _programs(session, job.id, 8)
        for i, program in enumerate(programs):  # island i % 4 holds scores i and i + 4
            await repository.add_elite(
                session, job_id=job.id, island=i % 4, cell=(i,), program_id=program.id,
                score=float(i), epoch=0,
            )  # fmt: skip
        reset = await repository.reset_islands(session, job.id, np.random.default_rng(1))
        epochs = await repository.island_epochs(session, job.id)
        late = await repository.add_elite(
            session, job_id=job.id, island=0, cell=(9,), program_id=programs[0].id, score=99.0,
            epoch=0,
        )  # fmt: skip
        islands = [await repository.island_elites(session, job.id, i) for i in range(4)]
    assert sorted(reset) == [0, 1]
    assert epochs == {0: 1, 1: 1, 2: 0, 3: 0}
    assert late is AddOutcome.STALE
    survivors_best = {islands[2][0], islands[3][0]}
    assert islands[2][0].score == 6.0 and islands[3][0].score == 7.0
    for island in (0, 1):
        assert len(islands[island]) == 1 and islands[island][0] in survivors_best


async def test_reset_does_nothing_while_no_island_has_an_elite(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config(islands=4))
        reset = await repository.reset_islands(session, job.id, np.random.default_rng(0))
        epochs = await repository.island_epochs(session, job.id)
    assert reset == []
    assert epochs == {0: 0, 1: 0, 2: 0, 3: 0}


# -------------------------------------------------------------------------------- state machine

ISLANDS = 3
CELLS = [(0, 0), (0, 1), (1, 1)]
SCORES = st.sampled_from([0.0, 0.5, 1.0, 2.0]) | st.floats(-10, 10, allow_nan=False)


class ArchiveMachine(RuleBasedStateMachine):
    """Offers programs to cells (some with stale epochs) and resets islands, against a model:
    each (island, cell) holds the best program offered since the island's last reset.

    The controller's in-memory copy (:class:`ArchiveMirror`) takes every offer too: it must decide
    exactly as the database's conditional upsert, and draw the same parents as SQL sampling."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.engine = create_engine(url)
        self.sessions = session_factory(self.engine)
        self.job_id = ""

        async def create_job(session: AsyncSession) -> None:
            self.job_id = (await repository.create_job(session, run_config(islands=ISLANDS))).id

        self.run(create_job)
        self.mirror = self.run(lambda s: ArchiveMirror.load(s, self.job_id))
        self.epochs = dict.fromkeys(range(ISLANDS), 0)
        self.model: dict[tuple[int, CellKey], tuple[str, float]] = {}
        self.offers = 0

    def run(self, step: Any) -> Any:
        """One transaction: the step, then a read of every elite and epoch (what the invariant
        checks; one transaction per step keeps the machine fast)."""

        async def transaction() -> Any:
            async with self.sessions.begin() as session:
                result = await step(session)
                self.stored = await _all_elites(session, self.job_id)
                self.stored_epochs = await repository.island_epochs(session, self.job_id)
                return result

        return self.loop.run_until_complete(transaction())

    @rule(island=st.integers(0, ISLANDS - 1), cell=st.sampled_from(CELLS), score=SCORES,
          stale=st.booleans())  # fmt: skip
    def offer(self, island: int, cell: CellKey, score: float, stale: bool) -> None:
        epoch = (
            self.epochs[island] - 1 if stale and self.epochs[island] > 0 else self.epochs[island]
        )
        self.offers += 1
        program = new_program(self.job_id, island=island, proposal_index=self.offers)

        async def step(session: AsyncSession) -> AddOutcome:
            await repository.insert_program(session, program)
            return await repository.add_elite(
                session, job_id=self.job_id, island=island, cell=cell, program_id=program.id,
                score=score, epoch=epoch,
            )  # fmt: skip

        outcome = self.run(step)
        mirrored = self.mirror.offer(
            island=island, cell=cell, program_id=program.id, score=score, epoch=epoch
        )
        assert mirrored is outcome
        incumbent = self.model.get((island, cell))
        if epoch != self.epochs[island]:
            assert outcome is AddOutcome.STALE
        elif incumbent is None:
            assert outcome is AddOutcome.NEW
        elif score > incumbent[1]:
            assert outcome is AddOutcome.IMPROVED
        else:
            assert outcome is AddOutcome.NOT_ADDED
        if outcome in (AddOutcome.NEW, AddOutcome.IMPROVED):
            self.model[(island, cell)] = (program.id, score)

    @rule(seed=st.integers(0, 2**16))
    def reset(self, seed: int) -> None:
        reset = self.run(
            lambda s: repository.reset_islands(s, self.job_id, np.random.default_rng(seed))
        )
        self.mirror = self.run(lambda s: ArchiveMirror.load(s, self.job_id))  # as the controller
        assert len(reset) <= ISLANDS // 2
        survivors_best = set()
        for island in set(range(ISLANDS)) - set(reset):
            elites = [EliteRef(c, p, s) for (i, c), (p, s) in self.model.items() if i == island]
            if elites:
                survivors_best.add(by_rank(elites)[0])
        if not survivors_best:
            assert reset == []
        for island in reset:
            self.epochs[island] += 1
            self.model = {key: v for key, v in self.model.items() if key[0] != island}
            seeded = [EliteRef(c, p, s) for i, c, p, s in self.stored if i == island]
            assert len(seeded) == 1 and seeded[0] in survivors_best
            self.model[(island, seeded[0].cell)] = (seeded[0].program_id, seeded[0].score)

    @rule(island=st.integers(0, ISLANDS - 1), seed=st.integers(0, 2**16))
    def sample(self, island: int, seed: int) -> None:
        draw = {"exploit_ratio": 0.5, "temperature": 2.0, "top": 2, "diverse": 1}
        stored = self.run(
            lambda s: repository.sample(s, self.job_id, island, np.random.default_rng(seed), **draw)
        )
        mirrored = self.mirror.sample(island, np.random.default_rng(seed), **draw)
        if stored is None:
            assert mirrored is None
            return
        assert mirrored is not None
        assert mirrored.parent.program_id == stored.parent.id
        assert [e.program_id for e in mirrored.inspirations] == [p.id for p in stored.inspirations]
        assert mirrored.epoch == stored.epoch

    @invariant()
    def elites_match_the_model(self) -> None:
        keys = [(island, cell) for island, cell, _, _ in self.stored]
        assert len(keys) == len(set(keys))  # at most one elite per (island, cell)
        assert {(i, c): (p, s) for i, c, p, s in self.stored} == self.model
        assert self.stored_epochs == self.epochs
        mirrored = {
            (i, e.cell): (e.program_id, e.score)
            for i in range(ISLANDS)
            for e in self.mirror.elites(i)
        }
        assert mirrored == self.model
        assert self.mirror.epochs == self.epochs

    def teardown(self) -> None:
        self.loop.run_until_complete(self.engine.dispose())
        self.loop.close()


def test_elites_are_the_best_offered_since_the_last_reset(migrated_sqlite_url: str) -> None:
    run_state_machine_as_test(
        lambda: ArchiveMachine(migrated_sqlite_url),
        settings=settings(max_examples=15, stateful_step_count=20, deadline=None),
    )


# ---------------------------------------------------------------------- races on real Postgres

ROUNDS = 40


@pytest.fixture
async def pg_sessions(migrated_postgres_url: str) -> Any:
    engine = create_engine(migrated_postgres_url)
    try:
        yield session_factory(engine)
    finally:
        await engine.dispose()


async def _race(sessions: Sessions, *steps: Any) -> list[Any]:
    """Run each step in its own transaction; all statements start together (a barrier)."""
    barrier = asyncio.Barrier(len(steps))

    async def one(step: Any) -> Any:
        async with sessions.begin() as session:
            await session.execute(select(1))  # hold a connection and an open transaction
            await barrier.wait()
            return await step(session)

    return list(await asyncio.gather(*(one(step) for step in steps)))


async def _offer(
    session: AsyncSession,
    *,
    job_id: str,
    island: int,
    cell: CellKey,
    program_id: str,
    score: float,
) -> AddOutcome:
    return await repository.add_elite(
        session,
        job_id=job_id,
        island=island,
        cell=cell,
        program_id=program_id,
        score=score,
        epoch=0,
    )


async def _reset(session: AsyncSession, *, job_id: str, seed: int) -> list[int]:
    return await repository.reset_islands(session, job_id, np.random.default_rng(seed))


async def test_racing_offers_to_one_cell_keep_the_better_program(pg_sessions: Sessions) -> None:
    rng = np.random.default_rng(5)
    async with pg_sessions.begin() as session:
        job = await repository.create_job(session, run_config(islands=1))
        programs = await _programs(session, job.id, 2 * ROUNDS)
    for round_ in range(ROUNDS):
        pair = programs[2 * round_ : 2 * round_ + 2]
        scores = rng.permutation([1.0, 2.0])

        outcomes = await _race(
            pg_sessions,
            *(
                functools.partial(
                    _offer, job_id=job.id, island=0, cell=(round_,), program_id=p.id, score=score
                )
                for p, score in zip(pair, scores, strict=True)
            ),
        )
        assert sorted(outcomes) in (
            [AddOutcome.NEW, AddOutcome.NOT_ADDED], [AddOutcome.IMPROVED, AddOutcome.NEW],
        )  # fmt: skip
    async with pg_sessions.begin() as session:
        elites = {e.cell: e for e in await repository.island_elites(session, job.id, 0)}
    assert len(elites) == ROUNDS
    assert all(e.score == 2.0 for e in elites.values())


async def test_racing_results_for_one_program_apply_once(pg_sessions: Sessions) -> None:
    """Two controllers (a duplicate delivery after a restart) apply results for the same pending
    programs at once: each program takes exactly one of them."""
    async with pg_sessions.begin() as session:
        job = await repository.create_job(session, run_config(islands=1))
        programs = await _programs(session, job.id, 2 * ROUNDS)
    for round_ in range(ROUNDS):
        pair = programs[2 * round_ : 2 * round_ + 2]
        # Both transactions hold results for both programs, in opposite orders and scores.
        batches = [
            [
                (evaluation_of(program, score), (round_,))
                for program, score in zip(pair, scores, strict=True)
            ]
            for scores in ((1.0, 2.0), (3.0, 4.0))
        ]
        batches[1].reverse()
        applied = await _race(
            pg_sessions,
            *(functools.partial(repository.apply_evaluations, results=batch) for batch in batches),
        )
        assert sorted(len(ids) for ids in applied) in ([0, 2], [1, 1])
        assert applied[0] | applied[1] == {program.id for program in pair}
        assert not applied[0] & applied[1]
    async with pg_sessions.begin() as session:
        stored = await repository.get_programs(session, [program.id for program in programs])
        counts = await repository.program_counts(session, job.id)
    assert counts.evaluated == 2 * ROUNDS and counts.pending == 0
    assert all(program.score in (1.0, 2.0, 3.0, 4.0) for program in stored)


async def _in_transaction(sessions: Sessions, step: Any) -> Any:
    async with sessions.begin() as session:
        return await step(session)


@pytest.mark.parametrize("first", ["reset", "offer"])
async def test_an_offer_interleaved_with_a_reset_never_leaves_a_stale_elite(
    pg_sessions: Sessions, first: str
) -> None:
    """The first transaction does its work and stays open while the second one starts; the
    second must wait for it (the island row lock), then act on what it committed."""
    async with pg_sessions.begin() as session:
        job = await repository.create_job(session, run_config(islands=2))
        strong, weak, late = await _programs(session, job.id, 3)
        for island, program, score in ((0, strong, 10.0), (1, weak, 1.0)):
            await repository.add_elite(
                session, job_id=job.id, island=island, cell=(0,), program_id=program.id,
                score=score, epoch=0,
            )  # fmt: skip
    reset_step = functools.partial(_reset, job_id=job.id, seed=0)
    offer_step = functools.partial(
        _offer, job_id=job.id, island=1, cell=(5,), program_id=late.id, score=3.0
    )
    opening, following = (reset_step, offer_step) if first == "reset" else (offer_step, reset_step)
    async with asyncio.TaskGroup() as tasks, pg_sessions.begin() as session:
        first_result = await opening(session)
        second = tasks.create_task(_in_transaction(pg_sessions, following))
        await asyncio.sleep(0.1)  # seconds: the second transaction reaches the database
        assert not second.done()  # it waits for the island row
    reset, offered = (first_result, second.result())[:: 1 if first == "reset" else -1]
    async with pg_sessions.begin() as session:
        elites = await _all_elites(session, job.id)
        epochs = await repository.island_epochs(session, job.id)
    assert reset == [1] and epochs == {0: 0, 1: 1}
    assert offered is (AddOutcome.STALE if first == "reset" else AddOutcome.NEW)
    assert elites == [(0, (0,), strong.id, 10.0), (1, (0,), strong.id, 10.0)]
