"""The contract every proposer meets: a prompt in, a proposal out."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from codevolve.core.prompt import Prompt, Proposal


class Proposer(Protocol):
    """Turns a prompt into SEARCH/REPLACE text (or a full rewrite).

    A proposer never raises for an expected failure: it returns a proposal whose ``error`` says why
    there is no answer. ``rng`` is the only source of randomness, so that a run is reproducible
    from its seed.
    """

    @property
    def name(self) -> str: ...

    @property
    def reads_prompt_text(self) -> bool:
        """Whether ``propose`` reads ``Prompt.text``. When it does not (the simulated proposer
        reads the structured fields), the text is rendered only if prompts are stored."""
        ...

    @property
    def cpu_bound(self) -> bool:
        """Whether ``propose`` computes its answer on this machine and never awaits (the
        simulated proposer). Such a proposer may run in proposal processes beside the
        controller, forked from it; one that calls out (an API) runs in the controller's loop."""
        ...

    async def propose(self, prompt: Prompt, rng: np.random.Generator) -> Proposal: ...


@runtime_checkable
class LearningProposer(Protocol):
    """A proposer that learns from what became of its proposals (e.g. an adaptive ensemble).

    ``proposer`` is the proposal's ``Proposal.proposer``; ``improvement`` is the child's score
    minus its parent's (0.0 when there is no evaluated child). ``calls`` > 1 reports a resumed
    job's history in one go, with summed cost and improvement.
    """

    def observe(
        self, proposer: str, *, cost_usd: float, improvement: float, calls: int = 1
    ) -> None: ...
