"""A deterministic proposer that edits the parent with mutations instead of asking a model.

Each call first picks a pool: the problem's domain mutations with probability ``domain_weight``,
else the generic ones. Mutations of that pool are tried in random order, then those of the other
pool, until one applies; the answer is real SEARCH/REPLACE text, so it goes through the same
applier as a model's answer. The same prompt and generator state give the same proposal.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from codevolve.core.problem import Mutation
from codevolve.core.prompt import Prompt, Proposal
from codevolve.proposers.errors import ProposerError
from codevolve.proposers.generic import generic_mutations

NO_MUTATION = "no applicable mutation"


class SimulatedProposer:
    """Answers a prompt with one domain or generic mutation of the parent."""

    name = "simulated"

    def __init__(
        self,
        domain: Sequence[Mutation],
        *,
        domain_weight: float,
        generic: Sequence[Mutation] | None = None,
        max_attempts: int | None = None,
    ) -> None:
        """``generic`` defaults to :func:`generic_mutations`; ``max_attempts`` (mutations tried
        per call) defaults to all of them."""
        if not 0.0 <= domain_weight <= 1.0:
            raise ProposerError(f"domain_weight must lie in [0, 1], got {domain_weight}")
        self._domain = tuple(domain)
        self._generic = tuple(generic_mutations() if generic is None else generic)
        if not self._domain and not self._generic:
            raise ProposerError("a simulated proposer needs at least one mutation")
        total = len(self._domain) + len(self._generic)
        self._max_attempts = total if max_attempts is None else max_attempts
        if self._max_attempts < 1:
            raise ProposerError(f"max_attempts must be at least 1, got {max_attempts}")
        self._domain_weight = domain_weight

    async def propose(self, prompt: Prompt, rng: np.random.Generator) -> Proposal:
        for mutation in self._order(rng)[: self._max_attempts]:
            text = mutation.propose(prompt, rng)
            if text:
                return Proposal(text=text, proposer=f"{self.name}:{mutation.kind}")
        return Proposal(text="", proposer=self.name, error=NO_MUTATION)

    def _order(self, rng: np.random.Generator) -> list[Mutation]:
        """The picked pool in random order, then the other pool in random order."""
        use_domain = bool(self._domain) and (
            not self._generic or rng.random() < self._domain_weight
        )
        first, second = (
            (self._domain, self._generic) if use_domain else (self._generic, self._domain)
        )
        return [pool[int(i)] for pool in (first, second) for i in _weighted_order(pool, rng)]


def _weighted_order(pool: Sequence[Mutation], rng: np.random.Generator) -> list[int]:
    """Indices of ``pool`` in random order, heavier mutations (a ``weight`` attribute, default
    1) likelier to come first; equal weights draw a plain permutation."""
    weights = np.array([float(getattr(m, "weight", 1.0)) for m in pool])
    if len(pool) < 2 or np.all(weights == weights[0]):
        return [int(i) for i in rng.permutation(len(pool))]
    chosen = rng.choice(len(pool), size=len(pool), replace=False, p=weights / weights.sum())
    return [int(i) for i in chosen]
