"""Evaluator of the function-minimisation example (OpenEvolve layout).

The objective is a Rastrigin function shifted to a minimum of 0 at a point drawn per run, so a
program cannot return a memorised answer. Each run gives the program a counting objective (at most
2000 calls) and a seed; the score of a run is 1 / (1 + f(x, y)) for the point returned, 1.0 at the
minimum. Stage 1 makes 3 runs (cheap); stage 2 makes 12. ``evaluate`` is stage 2, for runs without
a cascade. The program runs in this process: codevolve's sandbox isolates it.
"""

from __future__ import annotations

import importlib.util
import math
import random
from collections.abc import Callable

MAX_CALLS = 2000
BOUND = 5.0
NEAR = 0.05  # a run "finds" the minimum when its value is below this


class BudgetExceeded(Exception):
    pass


def _objective(shift: tuple[float, float], calls: list[int]) -> Callable[[float, float], float]:
    def objective(x: float, y: float) -> float:
        calls[0] += 1
        if calls[0] > MAX_CALLS:
            raise BudgetExceeded(f"more than {MAX_CALLS} calls of the objective")
        total = 20.0
        for value, centre in ((float(x), shift[0]), (float(y), shift[1])):
            d = value - centre
            total += d * d - 10.0 * math.cos(2 * math.pi * d)
        return total

    return objective


def _runs(program_path: str, seeds: range) -> dict[str, float | str]:
    spec = importlib.util.spec_from_file_location("search_program", program_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {program_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    scores, values, found = [], [], 0
    for seed in seeds:
        draw = random.Random(1000 + seed)
        shift = (draw.uniform(-3, 3), draw.uniform(-3, 3))
        calls = [0]
        objective = _objective(shift, calls)
        x, y = module.search_minimum(objective, seed)
        x, y = float(x), float(y)
        if not (math.isfinite(x) and math.isfinite(y)) or max(abs(x), abs(y)) > BOUND:
            raise ValueError(f"run {seed}: the point ({x}, {y}) is outside the search square")
        value = _objective(shift, [0])(x, y)
        values.append(value)
        scores.append(1.0 / (1.0 + value))
        found += value < NEAR
    return {
        "combined_score": sum(scores) / len(scores),
        "mean_value": sum(values) / len(values),
        "found_rate": found / len(values),
        "worst_run": f"value {max(values):.4f}",
    }


def evaluate_stage1(program_path: str) -> dict[str, float | str]:
    return _runs(program_path, range(3))


def evaluate_stage2(program_path: str) -> dict[str, float | str]:
    return _runs(program_path, range(3, 15))


def evaluate(program_path: str) -> dict[str, float | str]:
    return evaluate_stage2(program_path)
