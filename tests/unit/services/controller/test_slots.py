"""The run's proposal slots: one owner, each slot given back once."""

from __future__ import annotations

import asyncio

from codevolve.services.controller.slots import Slots


async def test_a_slot_given_back_twice_frees_one_place() -> None:
    slots = Slots(2)
    first = await slots.take()
    first.release()
    first.release()  # the proposal's finally after an earlier release: no second place
    await slots.take()
    await slots.take()
    assert not await _takes_within(slots, 0.05)  # 2 places, both taken


async def test_a_slot_held_by_a_child_comes_back_when_its_result_lands_not_before() -> None:
    slots = Slots(1)
    slot = await slots.take()
    slots.give(slot, "child")
    slot.release()  # the proposal ends: the child still holds it
    assert not await _takes_within(slots, 0.05)
    slots.landed("other")  # another program's result: not this slot's
    assert not await _takes_within(slots, 0.05)
    slots.landed("child")
    assert await _takes_within(slots, 1.0)
    slots.landed("child")  # a result delivered twice gives nothing back twice
    assert slots.held == 0


async def test_drain_waits_for_every_slot() -> None:
    slots = Slots(2)
    slot = await slots.take()
    slots.give(slot, "child")
    drained = asyncio.create_task(slots.drain())
    await asyncio.sleep(0.05)
    assert not drained.done()
    slots.landed("child")
    await asyncio.wait_for(drained, 1.0)


async def test_a_child_whose_task_was_not_sent_leaves_the_slot_to_its_proposal() -> None:
    slots = Slots(1)
    slot = await slots.take()
    slots.give(slot, "child")
    slots.not_sent("child")
    slot.release()  # the proposal meets the send's error and ends
    assert await _takes_within(slots, 1.0)


async def _takes_within(slots: Slots, seconds: float) -> bool:
    try:
        await asyncio.wait_for(slots.take(), seconds)
    except TimeoutError:
        return False
    return True
