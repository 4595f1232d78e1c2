"""A proposer that answers each parent the same way every time (the simulated proposer's
templates do) must not spend the budget on copies of one child before its result lands: a
proposal whose child is already in the job waits for the next result before the next one."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codevolve.core.prompt import Prompt, Proposal
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, upgrade
from tests.unit.services.controller.remeasure_support import run_seeded, seeded_config


class OneAnswerPerParent:
    """The child of a parent at generation n is generation n + 1, scoring one more: generation
    n can only be proposed once generation n - 1 has landed and been drawn as a parent."""

    name = "one-answer"
    reads_prompt_text = False
    cpu_bound = False

    async def propose(self, prompt: Prompt, rng: np.random.Generator) -> Proposal:
        del rng
        generation = prompt.parent.source.count("# generation") + 1
        source = f"def score(draw):\n    return {generation + 1.0}\n"
        return Proposal(text=source + "# generation\n" * generation, proposer=self.name)


async def test_a_deterministic_proposer_climbs_a_chain_instead_of_copying_one_child(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'run.sqlite'}")
    await upgrade(engine)
    sessions = session_factory(engine)
    config = seeded_config(max_proposals=24, max_in_flight=4, islands=1)
    async with sessions.begin() as session:
        job = await repository.create_job(session, config)
    try:
        state, controller = await run_seeded(
            job, sessions, LocalQueue(), [], proposer=OneAnswerPerParent()
        )
        async with sessions.begin() as session:
            programs = await repository.list_programs(session, job.id, limit=100, order="index")
    finally:
        await engine.dispose()
    assert state is not None and state.value == "done"
    assert controller.progress.proposals == 24
    generations = sorted(program.source.count("# generation") for program in programs)
    # Four slots, one answer per parent: each landed result gives one new generation (and the
    # other slots' copies of it). Without the wait, the copies are made while the child is in
    # flight and the budget is gone by generation 3.
    assert max(generations) >= 5, generations
