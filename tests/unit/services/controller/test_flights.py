"""Programs in flight: a task that could not be sent is not in flight; re-sends and hand-offs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from codevolve.core.task import Task
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.services.controller.flights import Flights, InFlight
from tests.integration.conftest import evaluation_of, new_program
from tests.unit.services.controller.conftest import Stored


class _DownQueue(LocalQueue):
    """A queue whose server is gone: every send fails."""

    async def submit(self, task: Task) -> None:
        raise ConnectionError("queue down")

    async def submit_many(self, tasks: Sequence[Task]) -> None:
        raise ConnectionError("queue down")


async def test_tasks_that_could_not_be_sent_are_not_in_flight(stored: Stored) -> None:
    flights = Flights(stored.job, _DownQueue(), stored.store)
    programs = [new_program(stored.job.id) for _ in range(2)]
    batch = [
        InFlight(program, task=flights.task(program, parent_scores={}, seed=1))
        for program in programs
    ]
    with pytest.raises(ConnectionError):
        await flights.send_many(batch)
    assert not flights and programs[0].id not in flights


async def test_stranded_pending_programs_are_sent_once_with_an_attempt_counted(
    stored: Stored,
) -> None:
    queue = LocalQueue()
    flights = Flights(stored.job, queue, stored.store)
    flying, stranded = new_program(stored.job.id), new_program(stored.job.id)
    async with stored.store.transaction() as unit:
        await unit.insert_program(flying)
        await unit.insert_program(stranded)
    task = flights.task(flying, parent_scores={}, seed=1)
    await flights.send(InFlight(flying, task=task))
    assert await flights.resend_pending(stranded_only=True) == 1
    sent = [await queue.claim(0.1) for _ in range(2)]
    assert [t.program_id for t in sent if t] == [flying.id, stranded.id]
    resent = flights.get(stranded.id)
    assert resent is not None and resent.program.attempts == 1
    assert await flights.resend_pending() == 2  # after a lost queue: all of them
    kept = flights.get(flying.id)
    assert kept is not None  # sent again, still in flight (a slot it holds stays: slots.py)


async def test_a_hand_off_continues_the_task_and_a_late_one_is_dropped(stored: Stored) -> None:
    queue = LocalQueue()
    flights = Flights(stored.job, queue, stored.store)
    program = new_program(stored.job.id)
    task = flights.task(program, parent_scores={"check": 1.0}, seed=7)
    await flights.send(InFlight(program, task=task))
    await queue.claim(0.1)
    unfinished = dataclasses.replace(evaluation_of(program, 1.0), handoff="gpu")
    await flights.hand_on(unfinished)
    handed = await queue.claim(0.1)
    assert handed is not None
    assert (handed.capability, handed.start_stage, handed.seed) == ("gpu", 2, 7)
    assert flights.land(program.id) is not None
    await flights.hand_on(unfinished)  # no longer in flight: nothing is sent
    assert queue.pending_tasks() == 0
