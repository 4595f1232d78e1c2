"""The run's proposal slots: how many proposals and their children may be in flight at once.

One object owns them. A proposal takes a slot (:meth:`Slots.take`) before it starts; the slot
goes back when the proposal ends without a child, or, when its child was enqueued, when that
child's result lands (:meth:`Slots.landed`). Handing a slot to a child (:meth:`Slots.give`)
happens before the child's task is sent, so a result can never land ahead of its slot; a task
that could not be sent hands it back to the proposal (:meth:`Slots.not_sent`). Every
release goes through :meth:`Slot.release`, which returns a slot once however often it is
called: the proposal's ``finally`` and a landed result cannot both give it back.
"""

from __future__ import annotations

import asyncio

from codevolve.core.program import ProgramId


class Slot:
    """One taken slot, returned once."""

    def __init__(self, free: asyncio.Semaphore) -> None:
        self._free = free
        self._returned = False
        self.child: ProgramId | None = None  # the enqueued child that now holds it

    def release(self) -> None:
        """Give the slot back, unless it was given back already or a child holds it."""
        if self._returned or self.child is not None:
            return
        self._returned = True
        self._free.release()

    def _land(self) -> None:
        self.child = None
        self.release()


class Slots:
    """The run's proposal slots."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._free = asyncio.Semaphore(size)
        self._held: dict[ProgramId, Slot] = {}  # enqueued children and the slots they hold

    async def take(self) -> Slot:
        await self._free.acquire()
        return Slot(self._free)

    def give(self, slot: Slot, child: ProgramId) -> None:
        """The slot now belongs to ``child`` until its result lands."""
        slot.child = child
        self._held[child] = slot

    def not_sent(self, child: ProgramId) -> None:
        """The child's task could not be sent: its slot is its proposal's again."""
        slot = self._held.pop(child, None)
        if slot is not None:
            slot.child = None

    def landed(self, program: ProgramId) -> None:
        """A result landed: the slot its program held (if any) goes back."""
        slot = self._held.pop(program, None)
        if slot is not None:
            slot._land()

    @property
    def held(self) -> int:
        """Slots held by children in flight."""
        return len(self._held)

    async def drain(self) -> None:
        """Wait until every slot is back: all proposals ended, all their children landed."""
        for _ in range(self._size):
            await self._free.acquire()
