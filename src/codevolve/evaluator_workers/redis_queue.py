"""The distributed queue: Redis Streams with consumer groups (redis-py ``redis.asyncio``).

- The controller adds each task to the stream of the task's capability (``cpu``, ``gpu``) and
  reads its job's results stream through a consumer group; a result is acknowledged when the
  controller asks for the next one, i.e. after it was applied, so a controller killed mid-apply
  reads it again at restart (applying is idempotent).
- A worker claims with ``XREADGROUP``; it publishes the evaluation, acknowledges and deletes the
  task in one ``MULTI``, so a task is never acknowledged without its result.
- A task whose worker died stays pending in the group; after ``lease_s`` without a lease renewal
  (heartbeats renew the tasks in hand) any worker reclaims it (``XAUTOCLAIM``). A task delivered
  more than ``max_deliveries`` times goes to the dead-letter stream instead, and its program fails
  with the reason, published as an ordinary (failed) evaluation.
- Redis is not the source of truth. The controller keeps a key per job (its *incarnation*); when
  the key is gone Redis has lost its data, and :attr:`RedisTaskQueue.lost` tells the composition
  root to resend every pending program from the database. Connection errors are waited out on both
  sides; a missing consumer group is created again.

Clients must be created with ``decode_responses=True``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from codevolve.core.codec import evaluation_from_dict as _evaluation_from_dict
from codevolve.core.codec import evaluation_to_dict, task_from_dict, task_to_dict
from codevolve.core.program import Evaluation
from codevolve.core.task import Task, failed_evaluation
from codevolve.evaluator_workers.redis_keys import (
    DEFAULT_CAPABILITY,
    RESULT_CONSUMER,
    RESULT_GROUP,
    TASK_GROUP,
    RedisKeys,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
UNREACHABLE = (redis_errors.ConnectionError, redis_errors.TimeoutError)
BACKOFF_FIRST_S = 0.1  # seconds; the first wait after a failed Redis call, doubled up to the cap
BACKOFF_CAP_S = 2.0  # seconds
DEAD_LETTERS_KEPT = 10_000  # entries; older dead letters are trimmed (approximately)
RESULTS_TTL_S = 86_400  # seconds a results stream nobody reads survives (a job that ended)
RESULTS_PER_READ = 64  # results fetched per round trip; each is acknowledged once applied


@dataclass(frozen=True, slots=True)
class QueueTuning:
    """Timing of leases and liveness checks. Defaults suit evaluations of seconds to minutes."""

    lease_s: float = 60.0  # seconds a claimed task may go without renewal before it is reclaimed
    max_deliveries: int = 3  # deliveries of one task before it is dead-lettered
    watch_s: float = 1.0  # seconds between the controller's checks that Redis kept its data


def task_capability(task: Task) -> str:
    """The capability a task needs: the stream it goes to (cpu unless it says otherwise)."""
    return task.capability or DEFAULT_CAPABILITY


async def ensure_group(redis: Redis, stream: str, group: str) -> None:
    """Create ``group`` on ``stream`` (and the stream) unless it exists. The group starts at the
    beginning, so tasks added before it existed (e.g. just after Redis lost its data) are seen."""
    try:
        await redis.xgroup_create(stream, group, id="0", mkstream=True)
    except redis_errors.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def _is_nogroup(exc: redis_errors.ResponseError) -> bool:
    """The stream or its group is gone (a flush); a blocked read is told ``UNBLOCKED``."""
    return str(exc).startswith(("NOGROUP", "UNBLOCKED"))


async def retrying(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call`` until Redis answers; a lost connection is waited out with backoff."""
    delay = BACKOFF_FIRST_S
    while True:
        try:
            return await call()
        except UNREACHABLE as exc:
            log.warning("redis unreachable (%s); retrying %s in %.1f s", exc, what, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_CAP_S)


def _entries(response: Any) -> list[tuple[str, dict[str, str]]]:
    """The entries of an ``XREADGROUP`` reply on one stream (RESP2 list or RESP3 dict)."""
    if not response:
        return []
    if isinstance(response, dict):
        streams = list(response.values())
        return [(str(i), dict(f)) for i, f in streams[0][0]] if streams and streams[0] else []
    return [(str(entry_id), dict(fields or {})) for entry_id, fields in response[0][1]]


# ------------------------------------------------------------------------------- controller side


class RedisTaskQueue:
    """The controller's side for one job (:class:`~.queue.TaskQueue`)."""

    def __init__(
        self,
        redis: Redis,
        job_id: str,
        *,
        keys: RedisKeys | None = None,
        tuning: QueueTuning | None = None,
    ) -> None:
        self._redis = redis
        self._job_id = job_id
        self._keys = keys or RedisKeys()
        self._tuning = tuning or QueueTuning()
        self._results = self._keys.results(job_id)
        self._cursor = "0"  # first our own unacknowledged results (a restart), then new ones
        self._buffer: deque[tuple[str, dict[str, str]]] = deque()  # read, not yet handed out
        self._applied: list[str] = []  # result ids handed out; acknowledged on the next call
        self._watched = 0.0  # monotonic time of the last incarnation check
        self._incarnation = uuid.uuid4().hex
        self.lost = asyncio.Event()  # set when Redis lost its data; the owner resends tasks
        self.losses = 0  # how often that happened

    async def start(self) -> None:
        """Mark this incarnation and create the results group; call before the first submit."""
        await retrying("start", self._mark)

    async def _mark(self) -> None:
        await self._redis.set(self._keys.incarnation(self._job_id), self._incarnation)
        await ensure_group(self._redis, self._results, RESULT_GROUP)

    async def close(self) -> None:
        """Forget the job's keys (its run ended); unread results of stray duplicates expire."""
        try:
            await self._redis.delete(self._keys.incarnation(self._job_id), self._results)
        except UNREACHABLE as exc:
            log.warning("job %s: keys left in redis (%s); they expire", self._job_id, exc)

    async def submit(self, task: Task) -> None:
        await self.submit_many([task])

    async def submit_many(self, tasks: Sequence[Task]) -> None:
        """All tasks in one ``MULTI``: one round trip, and all or none of them added (a retry
        after a lost connection may still add them twice: delivery is at least once anyway, and a
        result is applied once)."""
        if not tasks:
            return
        entries = [
            (self._keys.tasks(task_capability(task)), json.dumps(task_to_dict(task)))
            for task in tasks
        ]

        async def send() -> None:
            async with self._redis.pipeline(transaction=True) as pipe:
                for stream, payload in entries:
                    pipe.xadd(stream, {"task": payload})
                await pipe.execute()

        await retrying(f"submit of {len(tasks)} tasks", send)

    async def next_result(self, timeout_s: float) -> Evaluation | None:
        results = await self.next_results(timeout_s, 1)
        return results[0] if results else None

    async def next_results(self, timeout_s: float, limit: int) -> list[Evaluation]:
        try:
            await self._watch()
            if self._buffer:
                await self._acknowledge()
            else:
                # The results applied are acknowledged in the round trip that looks for more.
                self._buffer.extend(await self._acknowledge_and_read(timeout_s))
            if not self._buffer and self._cursor == "0":
                self._cursor = ">"  # our unacknowledged results are all read: on to new ones
                self._buffer.extend(await self._read(timeout_s))
        except redis_errors.ResponseError as exc:
            if not _is_nogroup(exc):
                raise
            await ensure_group(self._redis, self._results, RESULT_GROUP)
            return []
        except UNREACHABLE as exc:
            log.warning("job %s: redis unreachable (%s)", self._job_id, exc)
            await asyncio.sleep(timeout_s)
            return []
        results: list[Evaluation] = []
        while self._buffer and len(results) < limit:
            entry_id, fields = self._buffer.popleft()
            self._applied.append(entry_id)
            evaluation = evaluation_from_json(fields.get("evaluation", ""), self._job_id)
            if evaluation is not None:
                results.append(evaluation)
        return results

    async def _read(self, timeout_s: float) -> list[tuple[str, dict[str, str]]]:
        response = await self._redis.xreadgroup(
            RESULT_GROUP,
            RESULT_CONSUMER,
            {self._results: self._cursor},
            count=RESULTS_PER_READ,
            block=max(1, int(timeout_s * 1000)),
        )
        return _entries(response)

    async def _acknowledge_and_read(self, timeout_s: float) -> list[tuple[str, dict[str, str]]]:
        """Acknowledge (and delete) the results applied and read what is there, in one
        ``MULTI``; only when nothing is there, block for up to ``timeout_s`` in a second read."""
        if not self._applied:
            return await self._read(timeout_s)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xack(self._results, RESULT_GROUP, *self._applied)
            pipe.xdel(self._results, *self._applied)
            pipe.xreadgroup(  # inside MULTI a read never blocks: it returns what is there
                RESULT_GROUP, RESULT_CONSUMER, {self._results: self._cursor}, count=RESULTS_PER_READ
            )
            *_, response = await pipe.execute()
        self._applied.clear()
        entries = _entries(response)
        return entries if entries else await self._read(timeout_s)

    async def _acknowledge(self) -> None:
        if not self._applied:
            return
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xack(self._results, RESULT_GROUP, *self._applied)
            pipe.xdel(self._results, *self._applied)
            await pipe.execute()
        self._applied.clear()

    async def _watch(self) -> None:
        """Every ``watch_s``: is our incarnation key still there? If not, Redis lost its data."""
        now = time.monotonic()
        if now - self._watched < self._tuning.watch_s:
            return
        self._watched = now
        if await self._redis.exists(self._keys.incarnation(self._job_id)):
            return
        self.losses += 1
        log.warning("job %s: redis lost its data; pending programs are sent again", self._job_id)
        await self._mark()
        self._cursor = "0"
        self.lost.set()


def evaluation_from_json(text: str, job_id: str) -> Evaluation | None:
    """An evaluation from a stream entry; None (logged) for an entry that is not one."""
    try:
        evaluation = _evaluation_from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        log.error("job %s: unreadable result dropped (%s)", job_id, exc)
        return None
    return evaluation


# ----------------------------------------------------------------------------------- worker side


class RedisWorkSource:
    """A worker's side (:class:`~.queue.WorkSource`): claims from one capability's stream."""

    def __init__(
        self,
        redis: Redis,
        *,
        capability: str,
        consumer: str,
        keys: RedisKeys | None = None,
        tuning: QueueTuning | None = None,
    ) -> None:
        self._redis = redis
        self._keys = keys or RedisKeys()
        self._tuning = tuning or QueueTuning()
        self._stream = self._keys.tasks(capability)
        self._consumer = consumer
        self._in_hand: dict[int, str] = {}  # id(task) -> stream entry id
        self._swept = 0.0  # monotonic time of the last reclaim that found nothing
        self._claimed: deque[Task] = deque()  # read for waiting loops, not yet handed out
        self._waiting = 0  # loops inside claim(): how many tasks one read asks for
        self._reading = asyncio.Lock()  # one read at a time, for everyone waiting
        self._outbox: list[tuple[Task, Evaluation, asyncio.Future[None]]] = []
        self._publishing = False  # a loop is publishing batches now; others join its next one
        self.dead_lettered = 0

    @property
    def in_hand(self) -> int:
        """Tasks claimed and not completed (being evaluated, or read for a loop)."""
        return len(self._in_hand)

    @property
    def claimed(self) -> int:
        """Tasks read for loops that have not taken them yet: a draining worker still runs them."""
        return len(self._claimed)

    async def claim(self, timeout_s: float) -> Task | None:
        """One task. The loops of a worker share reads: while one loop waits on ``XREADGROUP``,
        the others queue behind it, and it asks for as many tasks as loops are waiting."""
        if self._claimed:
            return self._claimed.popleft()
        self._waiting += 1
        try:
            task = await self._reclaim()
            if task is not None:
                return task
            try:
                await asyncio.wait_for(self._reading.acquire(), timeout_s)
            except TimeoutError:
                return self._claimed.popleft() if self._claimed else None
            try:
                if not self._claimed:  # nobody read for us while we queued
                    await self._read(timeout_s)
            finally:
                self._reading.release()
        except redis_errors.ResponseError as exc:
            if not _is_nogroup(exc):
                raise
            await ensure_group(self._redis, self._stream, TASK_GROUP)
            return None
        except UNREACHABLE as exc:
            log.warning("worker %s: redis unreachable (%s)", self._consumer, exc)
            await asyncio.sleep(timeout_s)
            return None
        finally:
            self._waiting -= 1
        return self._claimed.popleft() if self._claimed else None

    async def _read(self, timeout_s: float) -> None:
        response = await self._redis.xreadgroup(
            TASK_GROUP,
            self._consumer,
            {self._stream: ">"},
            count=max(1, self._waiting),
            block=max(1, int(timeout_s * 1000)),
        )
        for entry_id, fields in _entries(response):
            task = await self._accept(entry_id, fields)
            if task is not None:
                self._claimed.append(task)

    async def _reclaim(self) -> Task | None:
        """Take over one task whose worker stopped renewing its lease, or dead-letter it."""
        if time.monotonic() - self._swept < self._tuning.lease_s / 4:
            return None
        _next, claimed, *_deleted = await self._redis.xautoclaim(
            self._stream,
            TASK_GROUP,
            self._consumer,
            min_idle_time=int(self._tuning.lease_s * 1000),
            start_id="0-0",
            count=1,
        )
        if not claimed:
            self._swept = time.monotonic()
            return None
        entry_id, fields = claimed[0]
        pending = await self._redis.xpending_range(
            self._stream, TASK_GROUP, min=entry_id, max=entry_id, count=1
        )
        deliveries = int(pending[0]["times_delivered"]) if pending else 1
        if deliveries > self._tuning.max_deliveries:
            await self._dead_letter(
                str(entry_id),
                dict(fields or {}),
                f"dead letter: delivered {deliveries - 1} times, no worker returned a result",
            )
            return None
        log.info("worker %s reclaimed task %s (delivery %d)", self._consumer, entry_id, deliveries)
        return await self._accept(str(entry_id), dict(fields or {}))

    async def _accept(self, entry_id: str, fields: dict[str, str]) -> Task | None:
        try:
            task = task_from_dict(json.loads(fields.get("task", "")))
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            await self._dead_letter(entry_id, fields, f"unreadable task: {exc}")
            return None
        self._in_hand[id(task)] = entry_id
        return task

    async def _dead_letter(self, entry_id: str, fields: dict[str, str], reason: str) -> None:
        log.warning("worker %s: task %s dead-lettered: %s", self._consumer, entry_id, reason)
        self.dead_lettered += 1
        async with self._redis.pipeline(transaction=True) as pipe:
            try:
                task = task_from_dict(json.loads(fields.get("task", "")))
            except (ValueError, KeyError, TypeError, ValidationError):
                task = None
            if task is not None:
                failed = failed_evaluation(task, reason, worker=self._consumer)
                self._publish(pipe, failed)
            pipe.xadd(
                self._keys.dead_letters(),
                dict(fields) | {"reason": reason, "stream": self._stream},  # type: ignore[arg-type]
                maxlen=DEAD_LETTERS_KEPT,
                approximate=True,
            )
            pipe.xack(self._stream, TASK_GROUP, entry_id)
            pipe.xdel(self._stream, entry_id)
            await pipe.execute()

    async def complete(self, task: Task, evaluation: Evaluation) -> None:
        """Publish the evaluation, then acknowledge the task, in one ``MULTI``. Results that
        finish while a publish is under way go out together in the next one."""
        done = asyncio.get_running_loop().create_future()
        self._outbox.append((task, evaluation, done))
        if not self._publishing:
            self._publishing = True
            try:
                while self._outbox:
                    batch, self._outbox = self._outbox, []
                    try:
                        await self._publish_batch(batch)
                    except Exception as exc:  # noqa: BLE001  (each waiting loop meets it)
                        for _task, _evaluation, waiting in batch:
                            if not waiting.done():
                                waiting.set_exception(exc)
            finally:
                self._publishing = False
        await done

    async def _publish_batch(
        self, batch: Sequence[tuple[Task, Evaluation, asyncio.Future[None]]]
    ) -> None:
        entry_ids = [
            entry_id
            for task, _evaluation, _done in batch
            if (entry_id := self._in_hand.get(id(task))) is not None
        ]

        async def publish() -> None:
            async with self._redis.pipeline(transaction=True) as pipe:
                for _task, evaluation, _done in batch:
                    self._publish(pipe, evaluation)
                if entry_ids:
                    pipe.xack(self._stream, TASK_GROUP, *entry_ids)
                    pipe.xdel(self._stream, *entry_ids)
                # The group is gone after a flush; the result still stands: do not raise for it.
                await pipe.execute(raise_on_error=False)

        await retrying(f"{len(batch)} result(s)", publish)
        for task, _evaluation, done in batch:
            self._in_hand.pop(id(task), None)
            done.set_result(None)

    def _publish(self, pipe: Any, evaluation: Evaluation) -> None:
        results = self._keys.results(evaluation.job_id)
        pipe.xadd(results, {"evaluation": json.dumps(evaluation_to_dict(evaluation))})
        pipe.expire(results, RESULTS_TTL_S)

    async def renew_leases(self) -> None:
        """Reset the idle time of the tasks in hand, so that a long evaluation is not reclaimed.
        ``JUSTID`` keeps the delivery count as it is."""
        entries: list[int | bytes | str | memoryview] = list(self._in_hand.values())
        if not entries:
            return
        try:
            await self._redis.xclaim(
                self._stream, TASK_GROUP, self._consumer, 0, entries, justid=True
            )
        except redis_errors.ResponseError as exc:
            # Redis lost the group (flushed, or restarted empty): there is no lease left to
            # renew; the tasks come again from the owner and the next claim makes the group.
            if not _is_nogroup(exc):
                raise

    async def leave(self) -> None:
        """Remove this consumer from the group once nothing is in hand (a graceful drain)."""
        if not self._in_hand:
            await self._redis.xgroup_delconsumer(self._stream, TASK_GROUP, self._consumer)
