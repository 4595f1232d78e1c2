"""Honest figures from noisy measurements: geometric means with their spread, winners re-measured
on independent samples, and speedups too good to be true flagged for review.

A search that keeps the best of many noisy timings keeps, among other things, the luckiest noise
(the winner's curse): the figure reported for a winner must come from samples taken after it was
picked. A speedup beyond what the hardware allows, or far beyond the best known, is far more often
a broken measurement or a gamed check (a kernel that skips work, a timer read too early, a cached
output) than a discovery: it is flagged, never celebrated. Pure functions; the backend that times
(say the GPU one) calls them, and the controller judges each would-be best of a job with
:func:`judge` before the job reports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from codevolve.core.errors import CodevolveError
from codevolve.core.program import EMPTY, Evaluation
from codevolve.core.remeasure import Remeasure as Remeasure
from codevolve.core.remeasure import Spread as Spread
from codevolve.core.remeasure import SpreadOver as SpreadOver
from codevolve.core.remeasure import Verdict as Verdict

SUSPICIOUS_OVER_BEST_KNOWN = 10.0  # a speedup this many times the best known one is suspicious
ROOFLINE_SLACK = 1.05  # timing noise tolerated above the roofline bound before flagging


class MeasurementError(CodevolveError, ValueError):
    """Figures that cannot be summarised: none, or not positive finite numbers."""


@dataclass(frozen=True, slots=True)
class RemeasurePolicy:
    """How winners are confirmed before they are reported."""

    top_k: int = 3  # the best this many candidates are re-measured (in a run: at once)
    samples: int = 5  # independent samples each, taken after the pick
    max_shrink: float = 0.10  # a winner that loses more than this share on re-measure is noted


DEFAULT_POLICY = RemeasurePolicy()


@dataclass(frozen=True, slots=True)
class Confirmation:
    """A winner's figure from the pick and from independent samples; report ``confirmed``."""

    picked: float  # geometric mean of the samples it was picked on
    confirmed: float  # geometric mean of independent samples taken afterwards
    shrink: float  # 1 - confirmed / picked; positive: the pick was lucky
    note: str | None  # why the confirmation should be looked at, or None


def spread(ratios: Sequence[float]) -> Spread:
    """The geometric mean of positive ratios and their spread; MeasurementError on bad input."""
    values = [_positive(value) for value in ratios]
    if not values:
        raise MeasurementError("no figures to summarise")
    logs = [math.log(value) for value in values]
    mean = sum(logs) / len(logs)
    variance = sum((x - mean) ** 2 for x in logs) / len(logs)
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = (
        ordered[middle]
        if len(ordered) % 2
        else math.sqrt(ordered[middle - 1] * ordered[middle])  # geometric, like the rest
    )
    return Spread(
        geomean=math.exp(mean),
        gsd=math.exp(math.sqrt(variance)),
        low=ordered[0],
        median=median,
        high=ordered[-1],
        count=len(values),
    )


def quantile(samples: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``samples``: linear interpolation between the order
    statistics, numpy's default. Timings are summarised with it (medians, 10/90 % tails)."""
    ordered = sorted(samples)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def confirm(
    picked_samples: Sequence[float],
    independent_samples: Sequence[float],
    policy: RemeasurePolicy = DEFAULT_POLICY,
) -> Confirmation:
    """Compare a winner's speedup samples from its pick with independent ones taken afterwards."""
    if len(independent_samples) < policy.samples:
        raise MeasurementError(
            f"{len(independent_samples)} independent samples, the policy wants {policy.samples}"
        )
    picked = spread(picked_samples).geomean
    confirmed = spread(independent_samples).geomean
    shrink = 1.0 - confirmed / picked
    note = None
    if shrink > policy.max_shrink:
        note = (
            f"winner's curse: {picked:.3f}x when picked, {confirmed:.3f}x on independent "
            f"samples ({shrink:.0%} less)"
        )
    return Confirmation(picked=picked, confirmed=confirmed, shrink=shrink, note=note)


def judge(
    picked: float,
    samples: Sequence[Evaluation],
    *,
    baseline_cases: Mapping[str, float] = EMPTY,
    policy: RemeasurePolicy = DEFAULT_POLICY,
) -> Remeasure:
    """The verdict on a program picked at ``picked`` from its independent re-measure ``samples``
    (evaluations of fresh seeds, in sample order). One that did not pass refutes it.

    The confirmed figure is :func:`confirm`'s geometric mean; where a score is not positive (a
    problem whose scores may be 0 or negative) it is the arithmetic mean, noted as such. The
    spread is over per-case speedups against ``baseline_cases`` (case key -> the initial
    program's cost) where the samples have cases it shares, else over the samples' scores.
    """
    scores: list[float] = []
    note: str | None
    for index, sample in enumerate(samples, 1):
        if sample.score is None:
            why = sample.error or _last_line(sample.feedback) or "no score"
            reason = f"re-measure sample {index} of {len(samples)} {sample.status.value}: {why}"
            return Remeasure(Verdict.REFUTED, picked, tuple(scores), None, reason)
        scores.append(sample.score)
    if picked > 0 and all(score > 0 for score in scores):
        outcome = confirm([picked], scores, policy)
        confirmed, note = outcome.confirmed, outcome.note
    else:
        confirmed = sum(scores) / len(scores)
        note = "scores not all positive: the confirmed figure is their arithmetic mean"
    summary, over = _spread_of(samples, scores, baseline_cases)
    return Remeasure(Verdict.CONFIRMED, picked, tuple(scores), confirmed, note, summary, over)


def _spread_of(
    samples: Sequence[Evaluation], scores: Sequence[float], baseline: Mapping[str, float]
) -> tuple[Spread | None, SpreadOver | None]:
    costs: dict[str, list[float]] = {}
    for sample in samples:
        for case in sample.cases:
            costs.setdefault(case.key, []).append(case.cost)
    speedups = [
        baseline[key] / spread(values).geomean
        for key, values in costs.items()
        if baseline.get(key, 0.0) > 0 and len(values) == len(samples) and min(values) > 0
    ]
    if speedups:
        return spread(speedups), SpreadOver.CASES
    if scores and min(scores) > 0:
        return spread(scores), SpreadOver.SAMPLES
    return None, None


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def flag_suspicious(
    speedup: float,
    *,
    roofline_bound: float | None,
    best_known: float | None,
    over_best_known: float = SUSPICIOUS_OVER_BEST_KNOWN,
) -> str | None:
    """Why ``speedup`` should be reviewed before anyone believes it, or None.

    A reference check, not yet called by any stage or by the controller (docs/decisions.md,
    "Reference code"): a backend that reports speedups against a known roofline calls it.

    ``roofline_bound``: the largest speedup the hardware allows over the same baseline (the
    baseline's time over the roofline time: bytes / bandwidth or flops / peak, whichever is
    larger). ``best_known``: the best speedup over the same baseline known so far (a vendor
    library, the best verified program). Either may be None when unknown.
    """
    if not (isinstance(speedup, int | float) and math.isfinite(speedup)) or speedup <= 0:
        return f"speedup {speedup!r} is not a positive finite number"
    if roofline_bound is not None and speedup > ROOFLINE_SLACK * roofline_bound:
        return (
            f"speedup {speedup:.3g}x is beyond the roofline bound of {roofline_bound:.3g}x: "
            "the measurement or the correctness check is broken"
        )
    if best_known is not None and speedup > over_best_known * best_known:
        return (
            f"speedup {speedup:.3g}x is more than {over_best_known:g}x the best known "
            f"{best_known:.3g}x: review before reporting"
        )
    return None


def _positive(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MeasurementError(f"{value!r} is not a number")
    if not math.isfinite(value) or value <= 0:
        raise MeasurementError(f"{value!r} is not a positive finite number")
    return float(value)
