"""Evaluator of the circle-packing example (OpenEvolve layout).

Stage 1 checks validity: 26 circles, every number finite, radii non-negative, every circle inside
the unit square and no two overlapping (a tolerance of 1e-9 for rounding, no more). Stage 2 scores
a valid packing by the sum of its radii, computed here from the radii returned (never taken from
the program). ``evaluate`` is stage 2, for runs without a cascade. The best known sum for 26
circles is about 2.6359.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

# Provided inside the sandbox by codevolve (or by an installed openevolve).
from openevolve.evaluation_result import EvaluationResult  # type: ignore[import-not-found]

CIRCLES = 26
TOLERANCE = 1e-9  # absolute slack for floating-point rounding
BEST_KNOWN = 2.6359


def _packing(program_path: str) -> tuple[list[tuple[float, float]], list[float]]:
    spec = importlib.util.spec_from_file_location("packing_program", program_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {program_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    centers, radii = module.construct_packing()
    return [_pair(c, i) for i, c in enumerate(centers)], [
        _real(r, f"radius {i}") for i, r in enumerate(radii)
    ]


def _real(value: Any, what: str) -> float:
    if isinstance(value, bool | complex | str | bytes):
        raise ValueError(f"{what} is {value!r}, not a real number")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{what} is {number}, not a finite number")
    return number


def _pair(value: Any, index: int) -> tuple[float, float]:
    items = list(value)
    if len(items) != 2:
        raise ValueError(f"center {index} has {len(items)} coordinates, not 2")
    return _real(items[0], f"center {index} x"), _real(items[1], f"center {index} y")


def problems(centers: list[tuple[float, float]], radii: list[float]) -> list[str]:
    """Every reason the packing is invalid; empty when it is valid."""
    if len(centers) != CIRCLES or len(radii) != CIRCLES:
        return [f"expected {CIRCLES} centers and radii, got {len(centers)} and {len(radii)}"]
    found = []
    for i, ((x, y), r) in enumerate(zip(centers, radii, strict=True)):
        if r < 0:
            found.append(f"circle {i} has a negative radius {r}")
        if min(x - r, y - r) < -TOLERANCE or max(x + r, y + r) > 1 + TOLERANCE:
            found.append(f"circle {i} at ({x:.6f}, {y:.6f}) with radius {r:.6f} leaves the square")
    for i in range(CIRCLES):
        for j in range(i + 1, CIRCLES):
            gap = math.dist(centers[i], centers[j]) - radii[i] - radii[j]
            if gap < -TOLERANCE:
                found.append(f"circles {i} and {j} overlap by {-gap:.3g}")
    return found


def _slack(i: int, centers: list[tuple[float, float]], radii: list[float]) -> float:
    """How much circle ``i`` could grow before it touches a wall or another circle."""
    (x, y), r = centers[i], radii[i]
    gaps = [min(x, y, 1 - x, 1 - y) - r]
    gaps += [math.dist(centers[i], centers[k]) - r - radii[k] for k in range(CIRCLES) if k != i]
    return min(gaps)


def evaluate_stage1(program_path: str) -> EvaluationResult:
    try:
        centers, radii = _packing(program_path)
    except (ValueError, TypeError) as exc:
        return EvaluationResult(
            metrics={"combined_score": 0.0, "validity": 0.0, "error": str(exc)},
            artifacts={"llm_feedback": f"invalid output: {exc}"},
        )
    found = problems(centers, radii)
    feedback = "valid packing" if not found else "; ".join(found[:5])
    valid = 0.0 if found else 1.0
    return EvaluationResult(
        metrics={"combined_score": valid, "validity": valid},
        artifacts={"llm_feedback": feedback},
    )


def evaluate_stage2(program_path: str) -> EvaluationResult:
    centers, radii = _packing(program_path)
    found = problems(centers, radii)
    if found:  # stage 1 passed this program: only a program that changes between runs gets here
        raise ValueError(f"invalid packing: {found[0]}")
    total = sum(radii)
    smallest = min(range(CIRCLES), key=lambda i: radii[i])
    slack = [_slack(i, centers, radii) for i in range(CIRCLES)]
    loose = sum(1 for gap in slack if gap > 1e-3)
    return EvaluationResult(
        metrics={
            "combined_score": total,
            "sum_radii": total,
            "target_ratio": total / BEST_KNOWN,
            "validity": 1.0,
        },
        artifacts={
            "llm_feedback": (
                f"sum of radii {total:.6f} ({total / BEST_KNOWN:.1%} of the best known "
                f"{BEST_KNOWN}); smallest circle {smallest} with radius {radii[smallest]:.4f}; "
                f"{loose} circles could grow by more than 0.001 without touching anything"
            )
        },
    )


def evaluate(program_path: str) -> EvaluationResult:
    return evaluate_stage2(program_path)
