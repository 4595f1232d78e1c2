"""The contract every proposer meets: a prompt in, a proposal out."""

from __future__ import annotations

from typing import Protocol

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

    async def propose(self, prompt: Prompt, rng: np.random.Generator) -> Proposal: ...
