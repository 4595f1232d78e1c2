"""A toy problem as a plug-in of its own package: 0/1 knapsack heuristics (problem.py)."""

from __future__ import annotations

from codevolve.core.plugin import ProblemPlugin
from codevolve.core.problem import Problem


def _problem() -> Problem:
    from knapsack_problem.problem import knapsack_problem

    return knapsack_problem()


PLUGIN = ProblemPlugin(name="knapsack", problem=_problem)
