"""Geometric means with their spread, the winner's-curse check, the verdict on a re-measure and
the suspicious-speedup flag."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from codevolve.core.codec import remeasure_from_dict, remeasure_to_dict
from codevolve.core.measurement import (
    MeasurementError,
    RemeasurePolicy,
    SpreadOver,
    Verdict,
    confirm,
    flag_suspicious,
    judge,
    quantile,
    spread,
)
from codevolve.core.program import CaseResult, Evaluation, ProgramStatus, StageResult


def test_spread_is_a_geometric_mean_with_its_distribution() -> None:
    summary = spread([0.5, 1.0, 2.0, 4.0])
    assert summary.geomean == pytest.approx(math.sqrt(2.0))
    assert (summary.low, summary.high, summary.count) == (0.5, 4.0, 4)
    assert summary.median == pytest.approx(math.sqrt(2.0))
    assert summary.gsd == pytest.approx(math.exp(math.log(2.0) * math.sqrt(1.25)))
    assert "1.414x" in str(summary) and "n=4" in str(summary)


def test_equal_ratios_have_no_spread() -> None:
    summary = spread([1.25, 1.25, 1.25])
    assert summary.geomean == pytest.approx(1.25)
    assert summary.gsd == pytest.approx(1.0)


@pytest.mark.parametrize(
    "bad", [[], [1.0, 0.0], [1.0, -2.0], [float("nan")], [float("inf")], [True]]
)
def test_spread_refuses_what_is_not_positive_finite_numbers(bad: list[float]) -> None:
    with pytest.raises(MeasurementError):
        spread(bad)


@pytest.mark.parametrize("q", [0.0, 0.1, 0.2, 0.5, 0.8, 0.9, 1.0])
def test_quantiles_interpolate_between_order_statistics_as_numpy_does(q: float) -> None:
    samples = [3.0, 1.0, 7.5, 2.25, 9.0, 4.0]  # unsorted: quantile sorts
    assert quantile(samples, q) == pytest.approx(float(np.quantile(samples, q)))
    assert quantile([5.0], q) == 5.0


def test_a_lucky_winner_is_reported_by_its_independent_samples_and_noted() -> None:
    outcome = confirm([1.5, 1.6, 1.4], [1.2, 1.1, 1.2, 1.15, 1.2])
    assert outcome.confirmed == pytest.approx(spread([1.2, 1.1, 1.2, 1.15, 1.2]).geomean)
    assert outcome.shrink > 0.2
    assert outcome.note is not None and "winner's curse" in outcome.note


def test_a_winner_that_holds_up_has_no_note() -> None:
    outcome = confirm([1.20, 1.22], [1.21, 1.19, 1.20, 1.22, 1.18])
    assert outcome.note is None
    assert abs(outcome.shrink) < 0.05


def test_confirmation_needs_the_policys_number_of_independent_samples() -> None:
    with pytest.raises(MeasurementError, match="wants 5"):
        confirm([1.2], [1.2, 1.2])


@pytest.mark.parametrize(
    ("speedup", "roofline", "best", "reason"),
    [
        (3.0, 2.0, None, "beyond the roofline"),
        (12.0, None, 1.0, "more than 10x the best known"),
        (float("nan"), 2.0, 1.0, "not a positive finite"),
        (0.0, None, None, "not a positive finite"),
    ],
)
def test_speedups_too_good_to_be_true_are_flagged_with_a_reason(
    speedup: float, roofline: float | None, best: float | None, reason: str
) -> None:
    flagged = flag_suspicious(speedup, roofline_bound=roofline, best_known=best)
    assert flagged is not None and reason in flagged


@pytest.mark.parametrize(
    ("speedup", "roofline", "best"), [(1.8, 2.0, 1.0), (2.04, 2.0, None), (9.0, None, 1.0)]
)
def test_plausible_speedups_are_not_flagged(
    speedup: float, roofline: float | None, best: float | None
) -> None:
    assert flag_suspicious(speedup, roofline_bound=roofline, best_known=best) is None


def _sample(score: float | None, *, cases: dict[str, float] | None = None) -> Evaluation:
    status = ProgramStatus.EVALUATED if score is not None else ProgramStatus.FAILED
    stage = StageResult(
        stage="score",
        passed=score is not None,
        score=score,
        cases=tuple(CaseResult(key, cost) for key, cost in (cases or {}).items()),
        error=None if score is not None else "IndexError: out of range",
    )
    return Evaluation(program_id="p", job_id="j", status=status, stages=(stage,), remeasure=1)


def test_a_re_measure_whose_samples_pass_is_confirmed_at_their_geometric_mean() -> None:
    verdict = judge(
        1.3, [_sample(1.2), _sample(1.25), _sample(1.3)], policy=RemeasurePolicy(samples=3)
    )
    assert verdict.verdict is Verdict.CONFIRMED
    assert verdict.confirmed == pytest.approx((1.2 * 1.25 * 1.3) ** (1 / 3))
    assert verdict.samples == (1.2, 1.25, 1.3) and verdict.note is None
    assert verdict.spread_over is SpreadOver.SAMPLES and verdict.spread is not None
    assert verdict.spread.count == 3


def test_a_re_measure_with_a_failing_sample_refutes_the_pick_and_says_why() -> None:
    verdict = judge(
        2.0, [_sample(1.9), _sample(None), _sample(2.0)], policy=RemeasurePolicy(samples=3)
    )
    assert verdict.verdict is Verdict.REFUTED and verdict.confirmed is None
    assert verdict.note == "re-measure sample 2 of 3 failed: IndexError: out of range"


def test_the_spread_of_a_confirmed_figure_is_over_per_case_speedups_against_the_baseline() -> None:
    samples = [
        _sample(1.5, cases={"a": 10.0, "b": 40.0}),
        _sample(1.5, cases={"a": 10.0, "b": 10.0}),
    ]
    verdict = judge(
        1.5,
        samples,
        baseline_cases={"a": 20.0, "b": 40.0, "c": 1.0},
        policy=RemeasurePolicy(samples=2),
    )
    assert verdict.spread_over is SpreadOver.CASES and verdict.spread is not None
    # a: 20 / 10 = 2; b: 40 / geomean(40, 10) = 40 / 20 = 2; c: no sample has it
    assert verdict.spread.low == pytest.approx(2.0) and verdict.spread.high == pytest.approx(2.0)
    assert verdict.spread.count == 2


def test_scores_that_are_not_all_positive_are_confirmed_at_their_arithmetic_mean() -> None:
    verdict = judge(-1.0, [_sample(-1.0), _sample(-3.0)], policy=RemeasurePolicy(samples=2))
    assert verdict.verdict is Verdict.CONFIRMED and verdict.confirmed == -2.0
    assert verdict.spread is None and "arithmetic mean" in (verdict.note or "")


def test_a_re_measure_survives_its_plain_data_form() -> None:
    verdict = judge(
        1.5,
        [_sample(1.2, cases={"a": 1.0})],
        baseline_cases={"a": 1.5},
        policy=RemeasurePolicy(samples=1),
    )
    assert remeasure_from_dict(json.loads(json.dumps(remeasure_to_dict(verdict)))) == verdict
    refuted = judge(1.5, [_sample(None)], policy=RemeasurePolicy(samples=1))
    assert remeasure_from_dict(remeasure_to_dict(refuted)) == refuted
