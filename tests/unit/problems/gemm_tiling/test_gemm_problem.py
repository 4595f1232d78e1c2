"""The gemm-tiling problem end to end: registry, cascade stages, features and baselines.

Stages are run against an in-process fake of the sandboxed Candidate: it executes the source (or a
harness) here (tests only) and passes answers through JSON, as the real sandbox does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from codevolve.core.errors import UnknownProblemError
from codevolve.core.problem import JSONValue, Problem, SandboxErrorKind, SandboxReply, Stage
from codevolve.core.program import StageResult
from codevolve.problems.gemm_tiling.problem import gemm_tiling_problem
from codevolve.problems.gemm_tiling.shapes import (
    heldout_shapes,
    tiling_split,
    train_shapes,
    validation_shapes,
)
from codevolve.problems.gemm_tiling.stages import (
    ProbeStage,
    StaticStage,
    TrainStage,
    static_grid,
)
from codevolve.problems.gemm_tiling.sweep import EDGE_PAIRS
from codevolve.problems.registry import get_problem, problem_names

INITIAL = gemm_tiling_problem().initial_program
FIRST_BRANCH = "    if M <= 32:\n"


@dataclass(frozen=True)
class InProcessCandidate:
    """Runs the candidate in this process: for tests of trusted stages only."""

    source: str

    def call(self, entry: str, args: Sequence[Sequence[JSONValue]]) -> SandboxReply:
        namespace: dict[str, object] = {}
        try:
            exec(compile(self.source, "<candidate>", "exec"), namespace)
            function = namespace[entry]
            assert callable(function)
            values = tuple(json.loads(json.dumps(function(*a))) for a in args)
        except Exception as error:
            return SandboxReply(
                values=None, error_kind=SandboxErrorKind.EXCEPTION, error=repr(error)
            )
        return SandboxReply(values=values)

    def call_harness(
        self, harness: str, entry: str, args: Sequence[Sequence[JSONValue]]
    ) -> SandboxReply:
        return InProcessCandidate(harness).call(entry, args)


def _with_branch(branch: str) -> InProcessCandidate:
    assert FIRST_BRANCH in INITIAL
    return InProcessCandidate(INITIAL.replace(FIRST_BRANCH, branch + FIRST_BRANCH, 1))


def _run_all(candidate: InProcessCandidate, seed: int = 0) -> list[StageResult]:
    rng = np.random.default_rng(seed)
    return [stage.run(candidate, rng) for stage in gemm_tiling_problem().stages]


def test_registry_builds_gemm_tiling_by_name() -> None:
    problem: Problem = get_problem("gemm-tiling")
    assert problem.name == "gemm-tiling"
    assert "gemm-tiling" in problem_names()


def test_registry_lists_known_names_for_an_unknown_one() -> None:
    with pytest.raises(UnknownProblemError, match="gemm-tiling"):
        get_problem("gemm-tilling")


def test_problem_describes_task_metric_space_and_split() -> None:
    problem = gemm_tiling_problem()
    text = problem.description
    for fact in (
        "choose_config(M, N, K)",
        "t_expert / t_chosen",
        "232448",
        "+ 40 <= 255",
        "held out",
        "(16, 32, 64, 128, 256)",
        "70B_tp8.down: N=8192, K=3584",
    ):
        assert fact in text
    assert "# EVOLVE-BLOCK-START" in problem.initial_program
    assert [f.name for f in problem.features] == ["distinct_configs", "decode_speedup"]
    assert all(f.bins == 8 and f.low < f.high for f in problem.features)
    assert [s.name for s in problem.stages] == ["static", "probe", "train"]


def test_problem_supplies_domain_mutations() -> None:
    assert len(gemm_tiling_problem().mutations()) > 0


def test_baselines_are_expert_lookup_and_oracle_speedups() -> None:
    baselines = {b.name: b for b in gemm_tiling_problem().baselines()}
    assert list(baselines) == ["expert", "lookup", "oracle"]
    assert (baselines["expert"].train, baselines["expert"].test) == pytest.approx((1.0, 1.0))
    assert 1.0 < baselines["lookup"].train <= baselines["oracle"].train


def test_initial_program_passes_every_stage_with_train_speedup_one() -> None:
    static, probe, train = _run_all(InProcessCandidate(INITIAL))
    assert (static.passed, static.score) == (True, 1.0)
    assert probe.passed and probe.score == pytest.approx(1.0)
    assert train.passed and train.score == pytest.approx(1.0)
    for name in ("speedup", "train_score", "validation_speedup", "speedup_decode"):
        assert train.metrics[name] == pytest.approx(1.0)
    assert 0.7 < train.metrics["over_oracle"] < 1.0
    assert 0.7 < train.metrics["validation_over_oracle"] < 1.0
    assert train.heldout["unseen_speedup"] == pytest.approx(1.0)
    assert train.heldout["seen_speedup"] == pytest.approx(1.0)
    assert train.heldout["score"] == train.heldout["unseen_speedup"]
    assert 0.0 < train.heldout["unseen_over_oracle"] < 1.0
    assert 0.0 < train.heldout["seen_over_oracle"] < 1.0
    assert dict(train.features) == pytest.approx({"distinct_configs": 3.0, "decode_speedup": 1.0})
    assert "1.000x" in train.feedback


def test_train_cases_cover_each_train_and_validation_shape_with_its_config() -> None:
    train = TrainStage().run(InProcessCandidate(INITIAL), np.random.default_rng(0))
    assert len(train.cases) == 187 + 408
    keys = {case.key for case in train.cases}
    selection = train_shapes() + validation_shapes()
    assert keys == {shape.key for shape in selection}  # held-out shapes are never cases
    assert not keys & {shape.key for shape in heldout_shapes()}
    case = next(c for c in train.cases if c.key.startswith("M=16 "))
    assert case.detail == "GemmConfig(32, 64, 64, 2, 3, 8)"
    assert case.cost > 0


def test_a_better_program_scores_above_one_on_train_and_test() -> None:
    better = _with_branch("    if M >= 1024:\n        return GemmConfig(256, 128, 64, 8, 3, 8)\n")
    static, probe, train = _run_all(better)
    assert static.passed and probe.passed and train.passed
    assert probe.score is not None and probe.score > 1.0
    assert train.metrics["speedup_prefill"] > 1.15
    assert train.metrics["speedup_decode"] == pytest.approx(1.0)
    assert train.heldout["unseen_speedup"] > 1.0
    assert train.heldout["seen_speedup"] > 1.0
    assert train.features["distinct_configs"] == 4.0


def test_an_illegal_literal_in_an_unreached_branch_fails_the_static_stage() -> None:
    bad = _with_branch("    if M == 3:\n        return GemmConfig(256, 256, 128, 4, 5, 8)\n")
    result = StaticStage().run(bad, np.random.default_rng(0))
    assert not result.passed and result.score is None
    assert result.error is not None
    assert "static check: line" in result.error and "cannot launch" in result.error


def test_a_computed_illegal_config_on_an_unseen_m_fails_the_static_stage() -> None:
    bad = _with_branch(
        "    if M == 50:\n        return GemmConfig(M * 0 + 256, 256, 128, 4, 5, 8)\n"
    )
    result = StaticStage().run(bad, np.random.default_rng(0))
    assert not result.passed
    assert result.error is not None
    assert "choose_config(50, " in result.error and "cannot launch" in result.error


@pytest.mark.parametrize(
    ("branch", "reason"),
    [
        ("    if M == 7:\n        return [64, 128, 64, 4, 3]\n", "expected 6 values"),
        ("    if M == 7:\n        return (64, 128, 64, 4.0, 3, 8)\n", "num_warps=4.0"),
        ("    if M == 7:\n        return 'GemmConfig(64, 128, 64, 4, 3, 8)'\n", "expected a list"),
    ],
)
def test_answers_that_are_not_six_ints_fail_the_static_stage(branch: str, reason: str) -> None:
    result = StaticStage().run(_with_branch(branch), np.random.default_rng(0))
    assert not result.passed
    assert result.error is not None and reason in result.error


def test_a_candidate_that_raises_fails_with_the_sandbox_error_kind() -> None:
    bad = _with_branch("    if M == 16:\n        raise RuntimeError('boom')\n")
    for stage in gemm_tiling_problem().stages:
        result = stage.run(bad, np.random.default_rng(0))
        assert not result.passed and result.score is None
        assert result.error is not None and result.error.startswith("exception: ")


def test_train_errors_on_held_out_shapes_do_not_name_them() -> None:
    # The shape is only in the test split; the train stage must not reveal which shape failed.
    hidden = heldout_shapes()[7]
    bad = _with_branch(
        f"    if M == {hidden.m} and N == {hidden.n} and K == {hidden.k}:\n"
        "        return (1, 2, 3)\n"
    )
    result = TrainStage().run(bad, np.random.default_rng(0))
    assert not result.passed
    assert result.error is not None
    assert result.error.startswith("a held-out shape returned")
    assert hidden.key not in result.error and f"N={hidden.n}" not in result.error


def test_a_slower_program_scores_below_one_and_fails_the_probe_threshold() -> None:
    slower = _with_branch("    return GemmConfig(16, 16, 16, 1, 1, 1)\n")
    probe = ProbeStage().run(slower, np.random.default_rng(0))
    assert probe.passed and probe.score is not None and probe.score < 0.5
    stage: Stage = ProbeStage()
    assert stage.threshold is not None
    assert not stage.threshold.passes(probe.score, parent_score=1.0)
    assert stage.threshold.passes(0.95, parent_score=1.0)


def test_static_grid_spans_known_and_fresh_shapes_and_changes_per_evaluation() -> None:
    split = tiling_split()
    first = static_grid(np.random.default_rng(1), split)
    second = static_grid(np.random.default_rng(2), split)
    seen = len(split.seen_grid)  # 374: the seen projections at every grid M
    assert 2 * seen <= len(first) <= 2 * seen + 1000
    assert len(set(first)) == len(first) - seen  # the seen grid shapes are asked twice
    assert list(first[:seen]) != list(split.seen_grid)  # in a fresh order
    # The held-out families' pairs are asked in the train stage only, where no error names them.
    assert {(s.n, s.k) for s in first}.isdisjoint((s.n, s.k) for s in split.unseen_test)
    assert {s.m for s in first} >= set(range(1, 65)) | {16384}
    pairs = {(s.n, s.k) for s in first}
    assert len(pairs) >= 12
    assert set(EDGE_PAIRS) <= pairs  # sizes no projection has: 1, primes, odd, very large
    assert len({pair for pair in pairs if pair[0] % 128 and pair[1] % 128}) >= 8
    assert set(first) != set(second)


def test_a_rule_that_no_train_shape_reaches_is_judged_on_the_validation_shapes() -> None:
    # N = 4096 at 2 <= M <= 8: no train shape (M is 1 or 16 there), validation M = 2, 4, 8.
    unreached = _with_branch(
        "    if 1 < M < 16 and N == 4096:\n        return GemmConfig(16, 16, 16, 1, 1, 1)\n"
    )
    assert not [s for s in train_shapes() if 1 < s.m < 16]
    train = TrainStage().run(unreached, np.random.default_rng(0))
    assert train.passed and train.score is not None
    assert train.metrics["train_score"] == pytest.approx(1.0)  # train alone cannot see the rule
    assert train.metrics["validation_speedup"] < 0.97  # 0.964: 9 of the 408 shapes are slowed
    assert train.score < 1.0
    reached = [s.key for s in validation_shapes() if 1 < s.m < 16 and s.n == 4096]
    assert len(reached) == 9  # 8B.o, 8B.down and DeepSeek-V2-Lite.kv_b at M = 2, 4, 8
    details = {c.key: c.detail for c in train.cases}
    assert {details[key] for key in reached} == {"GemmConfig(16, 16, 16, 1, 1, 1)"}
