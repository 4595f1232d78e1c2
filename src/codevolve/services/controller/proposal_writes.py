"""Settled proposals, written in batches: what a proposal becomes in the proposal log and,
when its answer applied, the child program.

Proposals that finish while a write is in progress are written together: one batched write
through the store (one statement on Postgres) and then one round trip to the queue for the
children's tasks. The first proposal to arrive while no write runs does the writing, batch after
batch, until nothing waits; the others join whatever batch comes next.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from codevolve.core.diff import ApplyFailure, ApplyFailureKind
from codevolve.core.job import Job
from codevolve.core.program import Program, ProgramStatus
from codevolve.core.prompt import Prompt, ProposalStatus
from codevolve.core.similarity import most_similar
from codevolve.program_db.job_store import JobStore
from codevolve.program_db.jobs import ProposalEntry
from codevolve.proposers.base import Proposer
from codevolve.services.controller.flights import Flights, InFlight
from codevolve.services.controller.proposal_pool import Settled, content_hash
from codevolve.services.controller.slots import Slot, Slots

INITIAL_PROPOSAL_INDEX = -1  # the seed program is not the answer to any proposal


class Written(StrEnum):
    """What became of a proposal once its write committed."""

    CHILD = "child"  # the child was inserted and enqueued; it holds the proposal's slot
    DUPLICATE = "duplicate"  # the child's code was already in the job
    RECORDED = "recorded"  # no child (the proposer failed or the answer did not apply)


@dataclass(frozen=True, slots=True)
class Answered:
    """A settled proposal as the log stores it, and its child (None: no code to evaluate)."""

    entry: ProposalEntry
    child: Program | None


def answered(
    job: Job,
    index: int,
    *,
    island: int,
    epoch: int,
    parent: Program,
    settled: Settled,
    prompt: Prompt,
    texts: tuple[str, str],
) -> Answered:
    """The log entry of proposal ``index`` and the child its answer made, if any. ``epoch``: the
    island's when the parent was drawn; ``texts``: the (prompt, answer) to store."""
    proposal, outcome = settled.proposal, settled.outcome
    entry = ProposalEntry(
        index=index,
        parent_id=parent.id,
        island=island,
        proposer=proposal.proposer,
        status=ProposalStatus.CHILD,
        tokens_in=proposal.tokens_in,
        tokens_out=proposal.tokens_out,
        cost_usd=proposal.cost_usd,
        prompt=texts[0],
        answer=texts[1],
        prompt_variant=prompt.variant,
    )
    if outcome is None:
        failed = ProposalStatus.PROPOSER_FAILED
        return Answered(
            dataclasses.replace(entry, status=failed, reason=proposal.error or ""), None
        )
    if isinstance(outcome, ApplyFailure):
        reason = f"{outcome.kind}: {outcome.message}"
        entry = dataclasses.replace(entry, status=ProposalStatus.APPLY_FAILED, reason=reason)
        return Answered(entry, None)
    near = _near_duplicate(job.config.novelty_threshold, outcome.source, prompt)
    if near is not None:
        return Answered(
            dataclasses.replace(entry, status=ProposalStatus.TOO_SIMILAR, reason=near), None
        )
    child = Program(
        id=uuid.uuid4().hex,
        job_id=job.id,
        source=outcome.source,
        content_hash=settled.content_hash,
        parent_id=parent.id,
        island=island,
        epoch=epoch,
        generation=parent.generation + 1,
        proposal_index=index,
        status=ProgramStatus.PENDING,
        attempts=1,  # its task is enqueued right after the insert commits
        diff=outcome.diff_text,
        proposer=proposal.proposer,
    )
    return Answered(dataclasses.replace(entry, program_id=child.id), child)


def _near_duplicate(threshold: float | None, source: str, prompt: Prompt) -> str | None:
    """Why a child is too like a program its prompt showed (the novelty filter); None if not."""
    if threshold is None:
        return None
    shown = [(view.id, view.source) for view in (prompt.parent, *prompt.inspirations)]
    found = most_similar(source, shown)
    if found is None or found[0] < threshold:
        return None
    return f"similarity {found[0]:.4f} to program {found[1]} >= novelty_threshold {threshold:g}"


def initial_program(job: Job, source: str) -> Program:
    """The job's seed: the problem's initial program, pending, on island 0."""
    return Program(
        id=uuid.uuid4().hex,
        job_id=job.id,
        source=source,
        content_hash=content_hash(source),
        parent_id=None,
        island=0,
        generation=0,
        proposal_index=INITIAL_PROPOSAL_INDEX,
        status=ProgramStatus.PENDING,
        proposer="initial",
    )


def failed_entry(index: int, proposer: Proposer) -> ProposalEntry:
    """The log entry of a proposal that broke in the controller (an unexpected error)."""
    return ProposalEntry(
        index=index,
        parent_id=None,
        island=0,
        proposer=proposer.name,
        status=ProposalStatus.PROPOSER_FAILED,
        reason="internal error (see the controller log)",
    )


@dataclass(slots=True)
class _Write:
    """A settled proposal waiting for the next batched write."""

    answered: Answered
    parent_scores: dict[str, float]
    seed: int
    slot: Slot  # its child, if enqueued, takes the proposal's slot over
    done: asyncio.Future[Written]


class KnownSources:
    """The content hashes of the job's programs that this controller wrote or met, so that a
    proposer whose answers cost nothing (the simulated one) can try again before a copy spends a
    proposal. Kept as 64-bit prefixes (a million programs in tens of MiB): a collision only costs
    one more try. A resumed controller starts with the initial program's alone; the database's
    unique content hash still catches every copy, logged as a duplicate."""

    def __init__(self, *hashes: str) -> None:
        self._prefixes = {self._prefix(h) for h in hashes}

    def __contains__(self, content_hash: str) -> bool:
        return bool(content_hash) and self._prefix(content_hash) in self._prefixes

    def add(self, content_hash: str) -> None:
        self._prefixes.add(self._prefix(content_hash))

    @staticmethod
    def _prefix(content_hash: str) -> int:
        return int(content_hash[:16], 16)


class ProposalWrites:
    """Writes settled proposals in batches, then sends their children's tasks."""

    def __init__(
        self, store: JobStore, flights: Flights, slots: Slots, *, known: KnownSources
    ) -> None:
        self._store = store
        self._slots = slots
        self._flights = flights
        self.known = known  # every child written goes in, inserted or a duplicate
        self._writes: list[_Write] = []  # settled proposals waiting for the writer
        self._writing = False  # a proposal is writing batches now; others join its next one

    def copies_known(self, settled: Settled) -> bool:
        """The settled child is a program the job holds: the parent itself (no change), or a
        program written before."""
        outcome = settled.outcome
        if isinstance(outcome, ApplyFailure):
            return outcome.kind is ApplyFailureKind.NO_CHANGE
        return settled.content_hash in self.known

    async def write(
        self, answer: Answered, *, parent_scores: dict[str, float], seed: int, slot: Slot
    ) -> Written:
        """Queue a settled proposal for the next batched write and wait until it is written."""
        done = asyncio.get_running_loop().create_future()
        write = _Write(
            answered=answer, parent_scores=parent_scores, seed=seed, slot=slot, done=done
        )
        self._writes.append(write)
        if not self._writing:
            self._writing = True
            try:
                while self._writes:
                    batch, self._writes = self._writes, []
                    try:
                        await self._write_batch(batch)
                    except Exception as exc:  # noqa: BLE001  (each proposal of the batch meets it)
                        for pending in batch:
                            if not pending.done.done():
                                pending.done.set_exception(exc)
            finally:
                self._writing = False
        return await write.done

    async def _write_batch(self, batch: Sequence[_Write]) -> None:
        """One write of the batch's children and proposal log, then one round trip to the queue
        for the children's tasks."""
        children = [write.answered.child for write in batch if write.answered.child is not None]
        entries = [write.answered.entry for write in batch]
        inserted = await self._store.write_proposals(children, entries)
        for written in children:
            self.known.add(written.content_hash)
        flights = []
        for write in batch:
            child = write.answered.child
            if child is not None and child.id in inserted:
                task = self._flights.task(child, parent_scores=write.parent_scores, seed=write.seed)
                self._slots.give(write.slot, child.id)  # before its task goes: then its result
                flights.append(InFlight(program=child, task=task))
        try:
            await self._flights.send_many(flights)
        except BaseException:
            # Not sent: the children are stranded (the run's end sends them), and the slots go
            # back with their proposals, which meet this error.
            for flight in flights:
                self._slots.not_sent(flight.program.id)
            raise
        for write in batch:
            child = write.answered.child
            if child is None:
                write.done.set_result(Written.RECORDED)
            elif child.id in inserted:
                write.done.set_result(Written.CHILD)
            else:
                write.done.set_result(Written.DUPLICATE)
