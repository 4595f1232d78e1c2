"""A proposer whose answers cost nothing (``cpu_bound``: the simulated one) draws again when its
child is a copy of a program the job holds (or of its parent), without spending a proposal; one
that calls out (an LLM) does not, and its copies are logged as duplicates (or as no change)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codevolve.core.prompt import Prompt, Proposal, ProposalStatus
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, upgrade
from tests.unit.services.controller.remeasure_support import run_seeded, seeded_config

VARIANTS = 40  # distinct children the proposer can make, whatever the parent


class FewAnswers:
    """A full rewrite drawn among VARIANTS programs: 20 draws repeat one another several times."""

    name = "few-answers"
    reads_prompt_text = False

    def __init__(self, *, cpu_bound: bool) -> None:
        self.cpu_bound = cpu_bound

    async def propose(self, prompt: Prompt, rng: np.random.Generator) -> Proposal:
        variant = int(rng.integers(VARIANTS))
        source = f"def score(draw):\n    return {1.0 + variant / VARIANTS}\n# variant {variant}\n"
        return Proposal(text=source, proposer=self.name)


@pytest.mark.parametrize(("cpu_bound", "copies"), [(True, False), (False, True)])
async def test_a_free_proposer_draws_again_instead_of_spending_a_proposal_on_a_copy(
    tmp_path: Path, cpu_bound: bool, copies: bool
) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'run.sqlite'}")
    await upgrade(engine)
    sessions = session_factory(engine)
    config = seeded_config(max_proposals=20, max_in_flight=1, islands=1)
    async with sessions.begin() as session:
        job = await repository.create_job(session, config)
    try:
        state, controller = await run_seeded(
            job, sessions, LocalQueue(), [], proposer=FewAnswers(cpu_bound=cpu_bound)
        )
        async with sessions.begin() as session:
            proposals = await repository.proposal_counts(session, job.id)
            counts = await repository.program_counts(session, job.id)
    finally:
        await engine.dispose()
    assert state is not None and state.value == "done"
    assert sum(proposals.values()) == 20
    duplicates = proposals.get(ProposalStatus.DUPLICATE, 0)
    assert controller.progress.duplicates == duplicates
    if copies:  # the same 20 draws, each spent: the birthday problem makes some of them copies
        assert duplicates >= 2, proposals
    else:
        assert duplicates == 0, proposals
        assert counts.total == 21, (counts, proposals)  # the initial program and 20 children
