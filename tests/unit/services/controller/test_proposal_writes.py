"""Settled proposals: what each becomes, and concurrent ones written in shared batches."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from codevolve.core.diff import Applied, ApplyFailure, ApplyFailureKind
from codevolve.core.program import Program, ProgramId, ProgramStatus
from codevolve.core.prompt import ProgramView, Prompt, Proposal, ProposalStatus
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.program_db.job_store import JobStore
from codevolve.program_db.jobs import ProposalEntry
from codevolve.services.controller.flights import Flights
from codevolve.services.controller.proposal_pool import Settled, content_hash
from codevolve.services.controller.proposal_writes import (
    Answered,
    KnownSources,
    ProposalWrites,
    Written,
    answered,
)
from codevolve.services.controller.slots import Slots
from tests.integration.conftest import new_program
from tests.unit.services.controller.conftest import Stored


class _CountingStore(JobStore):
    """The real store, counting its batched writes."""

    batches: list[int]

    async def write_proposals(
        self, children: Sequence[Program], entries: Sequence[ProposalEntry]
    ) -> set[ProgramId]:
        self.batches.append(len(entries))
        return await super().write_proposals(children, entries)


def _prompt(parent: Program) -> Prompt:
    view = ProgramView(id=parent.id, source=parent.source, score=1.0)
    return Prompt("job", "example", 0, 0, view, (), {}, "", "", variant="plain")


def _settled(source: str | None, *, failure: ApplyFailure | None = None) -> Settled:
    proposal = Proposal(text="answer", proposer="test", cost_usd=0.5)
    if failure is not None:
        return Settled(proposal=proposal, outcome=failure, content_hash="", seed=0)
    if source is None:
        failed = Proposal(text="", proposer="test", error="timed out")
        return Settled(proposal=failed, outcome=None, content_hash="", seed=0)
    applied = Applied(source=source, diff_text="diff", full_rewrite=False)
    return Settled(proposal=proposal, outcome=applied, content_hash=content_hash(source), seed=9)


def _answer(stored: Stored, index: int, settled: Settled, parent: Program) -> Answered:
    """Proposal ``index`` on island 1 (epoch 2) of ``parent``, its texts stored."""
    prompt = _prompt(parent)
    return answered(
        stored.job,
        index,
        island=1,
        epoch=2,
        parent=parent,
        settled=settled,
        prompt=prompt,
        texts=("p", "a"),
    )


def test_each_outcome_of_a_proposal_is_logged_and_only_code_makes_a_child(
    stored: Stored,
) -> None:
    parent = new_program(stored.job.id)
    failed = _answer(stored, 3, _settled(None), parent)
    assert failed.child is None and failed.entry.status is ProposalStatus.PROPOSER_FAILED
    assert failed.entry.reason == "timed out"
    no_match = ApplyFailure(ApplyFailureKind.NO_MATCH, "SEARCH text not found")
    unapplied = _answer(stored, 4, _settled("x", failure=no_match), parent)
    assert unapplied.child is None and unapplied.entry.status is ProposalStatus.APPLY_FAILED
    assert unapplied.entry.reason == "no_match: SEARCH text not found"
    child = _answer(stored, 5, _settled("def f(): return 2\n"), parent).child
    assert child is not None and child.status is ProgramStatus.PENDING
    assert (child.island, child.epoch, child.generation, child.attempts) == (1, 2, 1, 1)


async def test_proposals_settled_together_share_batches_and_duplicates_get_no_task(
    stored: Stored,
) -> None:
    store = _CountingStore(stored.sessions, stored.job.id)
    store.batches = []
    queue = LocalQueue()
    slots = Slots(4)
    writes = ProposalWrites(store, Flights(stored.job, queue, store), slots, known=KnownSources())
    parent = new_program(stored.job.id)
    async with store.transaction() as unit:
        await unit.insert_program(parent)
    sources = ["def f(): return 1\n", "def f(): return 2\n", "def f(): return 1\n", None]
    answers = [
        _answer(stored, index, _settled(source), parent) for index, source in enumerate(sources)
    ]
    taken = [await slots.take() for _ in answers]
    written = await asyncio.gather(
        *(
            writes.write(answer, parent_scores={}, seed=1, slot=slot)
            for answer, slot in zip(answers, taken, strict=True)
        )
    )
    assert written == [Written.CHILD, Written.CHILD, Written.DUPLICATE, Written.RECORDED]
    assert slots.held == 2  # each enqueued child holds its proposal's slot
    assert store.batches == [1, 3]  # the first writes alone; the others joined its next batch
    assert queue.pending_tasks() == 2
    await store.close()
