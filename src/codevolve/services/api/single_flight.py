"""Calls that overlap for one key share one call: what the API's caches do on a miss.

A burst of requests arrives at once and misses a cache together; without sharing, each would
ask the database the same question. :meth:`SingleFlight.call` makes the first caller's call the
one every overlapping caller for that key waits for. If that call raises or is cancelled, each
waiter makes its own call (an error is never shared, and a waiter is not cancelled with another
request).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(slots=True)
class _Flight(Generic[V]):
    """A call in flight, which overlapping callers for the same key wait for."""

    done: asyncio.Event = field(default_factory=asyncio.Event)
    answered: bool = False  # False once done: the call raised or was cancelled
    value: V | None = None


@dataclass(slots=True)
class SingleFlight(Generic[K, V]):
    """One call per key at a time; overlapping callers share its value."""

    _flights: dict[K, _Flight[V]] = field(default_factory=dict)

    async def call(self, key: K, fn: Callable[[], Awaitable[V]]) -> tuple[V, bool]:
        """``fn``'s value for ``key`` and whether it came from this caller's own shared call
        (True: the caller that made it, which may keep it). A caller that waited gets False,
        also when the shared call failed and it called ``fn`` for itself."""
        flight = self._flights.get(key)
        if flight is not None:
            await flight.done.wait()
            return (cast(V, flight.value) if flight.answered else await fn()), False
        flight = self._flights[key] = _Flight()
        try:
            flight.value = await fn()
            flight.answered = True
        finally:
            if self._flights.get(key) is flight:  # not dropped by forget_all meanwhile
                del self._flights[key]
            flight.done.set()
        return flight.value, True

    def forget_all(self) -> None:
        """Calls in flight are no longer shared: their callers get their values, later callers
        call again."""
        self._flights.clear()
