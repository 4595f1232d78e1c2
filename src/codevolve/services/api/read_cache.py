"""The API process's short memory of read answers.

A burst of requests (a dashboard per user, scripts polling every job) asks the same few reads
many times within a second: the job list, each job's detail and programs, the workers. Each was
a database read and a serialisation, about 1-3 ms of CPU, and the burst queued on the process's
one core (docs/deploy.md, "Under load"). So an answer, as the JSON bytes sent, is kept for
``ttl_s`` seconds (``serve --read-cache-s``, 1.0 by default; 0 turns the cache off) under a key
that names the route, its path and query parameters and what the caller may see (the owner
whose jobs a token shows; every job for the admin). Authentication still runs on every request:
only the answer is kept, never who may read it.

What that means for staleness: an answer is at most ``ttl_s`` older than the request it is served
to (plus the time its read took). A write through this process (a job submitted, paused,
resumed, cancelled; a token created or revoked) clears every kept answer when its transaction
commits, so this process's next read sees it; a read that was in flight across that write is
answered to its own callers but not kept. Changes made elsewhere (the controllers, another API
process, the command line) show within ``ttl_s``.

Requests that miss together for one key share one read (:meth:`ReadCache.answer`, through
:class:`~codevolve.services.api.single_flight.SingleFlight`), so a burst costs one database read
per key, not one per request. Only answers are kept: a read that raises
(a 404, a 503) is not, and each request that waited for it reads for itself.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

from codevolve.services.api.single_flight import SingleFlight
from codevolve.services.settings import READ_CACHE_S

MAX_ANSWERS = 1024  # answers kept at once, the oldest dropped first (1-200 KiB each)

Clock = Callable[[], float]  # monotonic seconds
Read = Callable[[], Awaitable[bytes]]  # the answer's JSON, read from the database
Key = Hashable  # (route, its parameters..., the caller's scope)


@dataclass(slots=True)
class ReadCache:
    """JSON answers by key, each for ``ttl_s`` after its read began; ``ttl_s`` 0 keeps none."""

    ttl_s: float = READ_CACHE_S
    max_answers: int = MAX_ANSWERS
    clock: Clock = time.monotonic
    # key -> (when it expires, the answer); insertion order is about expiry order (one ttl)
    _answers: dict[Key, tuple[float, bytes]] = field(default_factory=dict)
    _reads: SingleFlight[Key, bytes] = field(default_factory=SingleFlight)  # reads in flight
    _writes: int = 0  # writes seen (clear()); a read begun before the latest one is not kept

    async def answer(self, key: Key, read: Read) -> bytes:
        """The kept answer of ``key``, else what ``read`` returns (then kept). Callers that miss
        while a read of the same key is in flight wait for its answer; if that read raises (or
        its request is cancelled), each reads for itself."""
        if self.ttl_s <= 0:
            return await read()
        now = self.clock()
        kept = self._answers.get(key)
        if kept is not None:
            if kept[0] > now:
                return kept[1]
            del self._answers[key]
        writes = self._writes
        answer, own = await self._reads.call(key, read)
        if own and writes == self._writes:  # no write landed while it read: the answer is current
            self._keep(key, now + self.ttl_s, answer)
        return answer

    def clear(self) -> None:
        """A write through this process committed: forget every answer, and every read in flight
        (its callers get its answer; later callers read again)."""
        self._writes += 1
        self._answers.clear()
        self._reads.forget_all()

    def _keep(self, key: Key, expires: float, answer: bytes) -> None:
        """Keep ``answer``, first dropping the oldest answers while they have expired (or the
        cache is full): a burst's answers do not outlive it by much, whatever their keys."""
        self._answers.pop(key, None)  # re-inserted last: the dict stays about in expiry order
        now = self.clock()
        while self._answers and (
            len(self._answers) >= self.max_answers or next(iter(self._answers.values()))[0] <= now
        ):
            del self._answers[next(iter(self._answers))]
        self._answers[key] = (expires, answer)
