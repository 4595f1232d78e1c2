"""Result application: one guarded transition per batch, the archive and the best cases."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from codevolve.core.problem import FeatureSpec
from codevolve.core.program import CaseResult, ProgramStatus
from codevolve.services.controller.parents import ParentCache
from codevolve.services.controller.results import ResultApplier, ResultReads
from tests.integration.conftest import evaluation_of, new_program
from tests.unit.services.controller.conftest import Stored

FEATURES = (FeatureSpec("size", 0.0, 1.0, 4), FeatureSpec("speed", 0.0, 1.0, 4))


def _applier(stored: Stored) -> tuple[ResultApplier, ParentCache]:
    parents = ParentCache(stored.store, stored.job.config)
    return ResultApplier(stored.store, parents, FEATURES), parents


async def test_a_result_delivered_twice_in_a_batch_is_applied_once(stored: Stored) -> None:
    applier, _parents = _applier(stored)
    seed = new_program(stored.job.id, name="seed", proposal_index=-1)
    async with stored.store.transaction() as unit:
        await unit.insert_program(seed)
    result = evaluation_of(seed, 2.0)
    applied = await applier.apply([result, result], {seed.id: seed})
    assert [(a.program.id, a.cell) for a in applied] == [(seed.id, (1, 3))]
    again = await applier.apply([result], {})
    assert again == []
    async with stored.store.transaction() as unit:
        program = await unit.program(seed.id)
    assert program is not None and program.status is ProgramStatus.EVALUATED


async def test_the_seed_enters_every_island_and_the_cache(stored: Stored) -> None:
    applier, parents = _applier(stored)
    seed = new_program(stored.job.id, name="seed", proposal_index=-1)
    async with stored.store.transaction() as unit:
        await unit.insert_program(seed)
    await applier.apply([evaluation_of(seed, 2.0)], {seed.id: seed})
    assert parents.changed.is_set()
    assert parents.mirror is not None
    assert [len(parents.mirror.elites(island)) for island in (0, 1)] == [1, 1]
    reloaded = ParentCache(stored.store, stored.job.config)
    mirror = await reloaded.archive()
    assert [e.program_id for e in mirror.elites(1)] == [seed.id]  # committed, not only mirrored


async def test_a_failed_result_changes_no_cell_and_best_cases_keep_the_lowest_cost(
    stored: Stored,
) -> None:
    applier, parents = _applier(stored)
    first, second = (
        new_program(stored.job.id, name=n, proposal_index=i) for i, n in enumerate("ab")
    )
    async with stored.store.transaction() as unit:
        await unit.insert_program(first)
        await unit.insert_program(second)
    cheap = (CaseResult(key="m1", cost=1.0),)
    costly = (CaseResult(key="m1", cost=5.0), CaseResult(key="m2", cost=3.0))
    failed = evaluation_of(first, None, status=ProgramStatus.FAILED, cases=cheap)
    applied = await applier.apply([failed, evaluation_of(second, 1.0, cases=costly)], {})
    assert [a.cell for a in applied] == [None, (1, 3)]
    assert {k: (c.cost, c.program_id) for k, c in applier.best_cases.items()} == {
        "m1": (1.0, first.id),
        "m2": (3.0, second.id),
    }
    async with stored.store.transaction() as unit:
        assert await unit.best_cases() == applier.best_cases
    assert parents.mirror is not None
    assert [e.program_id for e in parents.mirror.elites(0)] == [second.id]  # not the failed one


class _AnswerOnCancel:
    """A queue whose read, when cancelled, ends with an answer instead of the cancellation (as a
    network client may): asyncio then drops the reader's cancel request."""

    async def next_results(self, timeout_s: float, limit: int) -> list[Any]:
        try:
            await asyncio.sleep(10 * timeout_s + 10)
        except asyncio.CancelledError:
            return []
        return []


async def test_a_cancelled_reader_stops_even_when_the_read_answers_the_cancel() -> None:
    reads = ResultReads(_AnswerOnCancel())  # type: ignore[arg-type]
    laps = 0

    async def consume() -> None:  # the shape of the controller's result loop
        nonlocal laps
        while True:
            await reads.next()
            laps += 1

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=2)
    if not done:  # the old reader: the cancel was lost and the loop reads on
        reads.stop()
        task.cancel()
    assert done and task.cancelled(), f"the reader went on for {laps} more read(s)"
    with pytest.raises(asyncio.CancelledError):
        await task
