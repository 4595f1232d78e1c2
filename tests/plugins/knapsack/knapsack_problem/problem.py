"""knapsack: evolve a 0/1 knapsack heuristic.

Task. ``choose(weights, values, capacity)`` returns the indices of the items to take.
Metric. The mean over 20 fixed instances of value taken / best value (by dynamic programming).
Cascade: a two-instance smoke test, then all 20. Features: the share of items taken.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import numpy as np

from codevolve.core.problem import Candidate, FeatureSpec, JSONValue, ProblemSpec
from codevolve.core.program import CaseResult, StageResult

NAME = "knapsack"
ENTRY_POINT = "choose"


@functools.cache
def _instances() -> tuple[tuple[list[int], list[int], int, int], ...]:
    rng = np.random.default_rng(0)  # fixed data: the same instances in every process
    out = []
    for _ in range(20):
        w = [int(x) for x in rng.integers(1, 30, size=15)]
        v = [int(x) for x in rng.integers(1, 50, size=15)]
        cap = sum(w) // 3
        best = [0] * (cap + 1)  # dynamic programming: the optimum
        for wi, vi in zip(w, v, strict=True):
            for c in range(cap, wi - 1, -1):
                best[c] = max(best[c], best[c - wi] + vi)
        out.append((w, v, cap, best[cap]))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class InstancesStage:
    name: str
    count: int  # how many instances, from the first

    @property
    def threshold(self) -> None:
        return None  # every program that runs goes on

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        del rng
        cases = _instances()[: self.count]
        args: list[list[JSONValue]] = [[list(w), list(v), cap] for w, v, cap, _ in cases]
        reply = candidate.call(ENTRY_POINT, args)  # one sandboxed child, every instance
        if not reply.ok or reply.values is None:
            return StageResult(self.name, passed=False, score=None, error=reply.error)
        ratios, taken, results = [], [], []
        for i, ((w, v, cap, best), answer) in enumerate(zip(cases, reply.values, strict=True)):
            if (
                not isinstance(answer, list)
                or not all(type(j) is int and 0 <= j < len(w) for j in answer)
                or len(set(answer)) != len(answer)
            ):
                return StageResult(self.name, False, None, error=f"case {i}: not item indices")
            if sum(w[j] for j in answer) > cap:
                return StageResult(self.name, False, None, error=f"case {i}: over capacity")
            ratios.append(sum(v[j] for j in answer) / best)
            taken.append(len(answer) / len(w))
            results.append(CaseResult(key=str(i), cost=1.0 - ratios[-1]))
        score = float(np.mean(ratios))
        return StageResult(
            self.name,
            passed=True,
            score=score,
            metrics={"value_ratio": score},
            features={"taken_share": float(np.mean(taken))},
            cases=tuple(results),
        )


def knapsack_problem() -> ProblemSpec:
    return ProblemSpec(
        name=NAME,
        description=(
            "Improve choose(weights, values, capacity): the indices of the items to take, "
            "total weight <= capacity; score = value taken / the optimum."
        ),
        initial_program=resources.files(__package__).joinpath("initial_program.py").read_text(),
        stages=(InstancesStage("smoke", 2), InstancesStage("all", 20)),
        features=(FeatureSpec("taken_share", low=0.0, high=1.0, bins=10),),
        # no domain mutations: the simulated proposer's generic ones still apply
    )
