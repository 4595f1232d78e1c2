"""What re-measuring a would-be best concluded, as values: the verdict, the figures and their
spread. The rules that produce them live in :mod:`codevolve.core.measurement`; these values live
apart so that a program's evaluation (:mod:`codevolve.core.program`) can carry one without the
two modules importing each other."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class Spread:
    """A geometric mean of ratios (speedups) and how they are distributed around it."""

    geomean: float
    gsd: float  # geometric standard deviation, >= 1 (1: all equal)
    low: float  # the smallest
    median: float
    high: float  # the largest
    count: int

    def __str__(self) -> str:
        return (
            f"{self.geomean:.3f}x (x/÷ {self.gsd:.2f}; min {self.low:.3f}, median "
            f"{self.median:.3f}, max {self.high:.3f}; n={self.count})"
        )


class Verdict(StrEnum):
    CONFIRMED = "confirmed"  # every independent sample passed: report ``Remeasure.confirmed``
    REFUTED = "refuted"  # a sample failed or was rejected: it passed only on lucky inputs


class SpreadOver(StrEnum):
    CASES = "cases"  # per-case speedups over the initial program, costs averaged over samples
    SAMPLES = "samples"  # the independent samples' scores (a problem without cases)


@dataclass(frozen=True, slots=True)
class Remeasure:
    """What re-measuring a would-be best on independent samples concluded."""

    verdict: Verdict
    picked: float  # the score it was picked on
    samples: tuple[float, ...]  # the scores of the independent samples that passed
    confirmed: float | None  # the figure to report; None when refuted
    note: str | None  # the winner's-curse note, or why it was refuted
    spread: Spread | None = None  # how the confirmed figure is distributed
    spread_over: SpreadOver | None = None
