"""Which model answers a proposal: configured weights, or a bandit over improvement per cost.

With fixed weights a model is picked with probability ``weight / sum(weights)`` (e.g. a fast model
at 0.8 and a strong one at 0.2). With ``adaptive`` the probability of model i is

    p_i = (1 - explore) * w_i * v_i / sum_j(w_j * v_j)  +  explore * w_i / sum_j(w_j)

where v_i is the model's improvement per unit of cost: the summed improvement of its children over
their parents (failed and worse children count 0), divided by its summed cost, both shrunk toward
the ensemble's pooled rate by ``prior_calls`` pseudo-calls so that a model with few calls is
neither starved nor trusted on luck. The ``explore`` share keeps every model sampled. Cost is USD
when any model has a price, else one unit per call (improvement per call).

Models whose circuit breaker is open are skipped; the caller decides what to do when all are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codevolve.core.config import ModelConfig
from codevolve.proposers.errors import ProposerError
from codevolve.proposers.llm.prices import prices_of

DEFAULT_EXPLORE = 0.1  # share of picks made by the configured weights alone
DEFAULT_PRIOR_CALLS = 4.0  # pseudo-calls at the pooled rate added to every model


@dataclass(slots=True)
class ModelStats:
    calls: int = 0
    cost: float = 0.0  # USD, or calls when no model has a price
    improvement: float = 0.0  # summed score gains of children over parents


class Ensemble:
    """Picks models by weight; learns from :meth:`observe` when ``adaptive``."""

    def __init__(
        self,
        models: Sequence[ModelConfig],
        *,
        adaptive: bool = False,
        explore: float = DEFAULT_EXPLORE,
        prior_calls: float = DEFAULT_PRIOR_CALLS,
    ) -> None:
        if not models:
            raise ProposerError("an ensemble needs at least one model")
        if not 0.0 <= explore <= 1.0 or prior_calls <= 0:
            raise ProposerError(f"explore must lie in [0, 1] and prior_calls > 0, got {explore}")
        self._models = tuple(models)
        self._by_name = {model.name: model for model in self._models}
        self._adaptive = adaptive
        self._explore = explore
        self._prior_calls = prior_calls
        self._priced = any(sum(prices_of(model)) > 0 for model in self._models)
        self.stats = {model.name: ModelStats() for model in self._models}

    @property
    def models(self) -> tuple[ModelConfig, ...]:
        return self._models

    def probabilities(self, names: Sequence[str] | None = None) -> dict[str, float]:
        """The probability of picking each model of ``names`` (default: all)."""
        chosen = [self._by_name[name] for name in (names or self._by_name)]
        weights = np.array([model.weight for model in chosen])
        base = weights / weights.sum()
        if not self._adaptive:
            return {model.name: float(p) for model, p in zip(chosen, base, strict=True)}
        values = np.array([self._value(model.name) for model in chosen])
        learned = weights * values
        if learned.sum() <= 0:  # nothing improved yet: the configured weights alone
            mixed = base
        else:
            mixed = (1 - self._explore) * learned / learned.sum() + self._explore * base
        return {model.name: float(p) for model, p in zip(chosen, mixed, strict=True)}

    def choose(
        self, rng: np.random.Generator, available: Sequence[str] | None = None
    ) -> ModelConfig:
        """One model of ``available`` (default: all), drawn from :meth:`probabilities`."""
        names = list(self._by_name) if available is None else list(available)
        if not names:
            raise ProposerError("no model available to choose from")
        probabilities = self.probabilities(names)
        p = np.array([probabilities[name] for name in names])
        return self._by_name[names[int(rng.choice(len(names), p=p / p.sum()))]]

    def observe(self, name: str, *, cost_usd: float, improvement: float, calls: int = 1) -> None:
        """Count ``calls`` calls of ``name`` (one, or a resumed job's history): what they cost and
        how much their children gained (0 if none)."""
        stats = self.stats.get(name)
        if stats is None:
            return  # a model of an earlier config (a resumed job): nothing to learn here
        stats.calls += calls
        stats.cost += cost_usd if self._priced else float(calls)
        stats.improvement += max(improvement, 0.0)

    def _value(self, name: str) -> float:
        """Improvement per unit of cost, shrunk toward the pooled rate by ``prior_calls``."""
        calls = sum(s.calls for s in self.stats.values())
        if calls == 0:
            return 1.0
        pooled_gain = sum(s.improvement for s in self.stats.values()) / calls  # per call
        pooled_cost = sum(s.cost for s in self.stats.values()) / calls  # per call
        stats = self.stats[name]
        cost_per_call = stats.cost / stats.calls if stats.calls else pooled_cost
        gain = stats.improvement + self._prior_calls * pooled_gain
        cost = stats.cost + self._prior_calls * cost_per_call
        return gain / cost if cost > 0 else 0.0
