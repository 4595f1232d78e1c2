"""The legality sweep of the static stage: configs computed on rare branches are found, named.

Programs run through the in-process fake of the sandbox (the sweep's harness too); the real
sandbox runs the same programs in tests/security.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from codevolve.core.problem import LEGALITY, LEGALITY_INPUTS, PROVEN, TESTED
from codevolve.core.program import StageResult
from codevolve.problems.gemm_tiling.shapes import tiling_split
from codevolve.problems.gemm_tiling.stages import StaticStage, static_grid
from codevolve.problems.gemm_tiling.sweep import (
    DENSE_MAX_M,
    EDGE_PAIRS,
    FRESH_DENSE_MAX_M,
    FRESH_PAIRS,
    LARGE_MAX_M,
    ODD_DENSE_MAX_M,
    ODD_PAIRS,
    on_the_grid,
    sweep_plan,
)
from tests.unit.problems.gemm_tiling.test_gemm_problem import (
    FIRST_BRANCH,
    INITIAL,
    InProcessCandidate,
)

SEEN_PAIRS = tiling_split().seen_pairs
KNOWN_N = str(tuple(sorted({n for n, _ in SEEN_PAIRS})))  # every seen projection's N
BAD = "GemmConfig(256, 256, 128, 4, 5, 8)"  # needs 552 registers a thread
CANNOT_LAUNCH = f"returned {BAD}, which cannot launch: needs 552 registers per thread (max 255)"
KNOWN_GOOD = sorted(
    (Path(__file__).parents[4] / "data" / "gemm_tiling_gpu" / "programs").glob("*.py")
)


def _with_branch(branch: str) -> str:
    """The initial program with ``branch`` before its first rule."""
    return INITIAL.replace(FIRST_BRANCH, branch + FIRST_BRANCH, 1)


def _static(source: str, seed: int = 0) -> StageResult:
    return StaticStage().run(InProcessCandidate(source), np.random.default_rng(seed))


def _failure(source: str, seed: int = 0) -> str:
    result = _static(source, seed)
    assert not result.passed and result.score is None
    assert result.error is not None
    return result.error


def test_arithmetic_on_a_rare_m_is_caught_with_the_smallest_such_m_named() -> None:
    error = _failure(
        _with_branch(
            "    if M % 1000 == 999:\n        return GemmConfig(64*4, 64*4, 32*4, 4, 5, 8)\n"
        )
    )
    assert error == f"choose_config(999, 6144, 4096) {CANNOT_LAUNCH}"


def test_a_branch_on_a_large_m_within_the_bound_is_caught() -> None:
    error = _failure(
        _with_branch(
            "    if 12288 < M < 12300:\n"
            "        return GemmConfig(M // M * 256, 256, 128, 4, 5, 8)\n"
        )
    )
    assert error == f"choose_config(12289, 6144, 4096) {CANNOT_LAUNCH}"


def test_a_rare_branch_of_an_unseen_pair_is_caught_on_a_fresh_pair() -> None:
    error = _failure(
        _with_branch(
            f"    if N not in {KNOWN_N} and M % 512 == 300:\n"
            "        return GemmConfig(*[v * 4 for v in (64, 64, 32)], 4, 5, 8)\n"
        )
    )
    match = re.fullmatch(r"choose_config\(300, (\d+), (\d+)\) (.*)", error)
    assert match is not None, error
    assert int(match[1]) not in {n for n, _ in SEEN_PAIRS} and int(match[1]) % 128 == 0
    assert match[3] == CANNOT_LAUNCH


def test_a_config_computed_in_a_helper_is_caught() -> None:
    helper = "def _warps(m: int) -> int:\n    return 4 if m % 4096 == 1234 else 8\n\n\n"
    rule = "    if M > 1024:\n        return GemmConfig(256, 128, 64, _warps(M), 3, 8)\n"
    source = INITIAL.replace("def choose_config(", helper + "def choose_config(")
    error = _failure(source.replace(FIRST_BRANCH, rule + FIRST_BRANCH, 1))
    assert error == (
        "choose_config(1234, 6144, 4096) returned GemmConfig(256, 128, 64, 4, 3, 8), which "
        "cannot launch: needs 296 registers per thread (max 255)"
    )


def test_a_table_built_at_import_is_caught_at_its_first_key() -> None:
    source = INITIAL.replace(
        "def choose_config(",
        "RARE = {m: GemmConfig(*(4 * v for v in (64, 64, 32)), 4, 5, 8)\n"
        "        for m in range(1999, 16384, 2000)}\n\n\ndef choose_config(",
    ).replace(
        "    if M <= 32:\n", "    if M in RARE:\n        return RARE[M]\n    if M <= 32:\n", 1
    )
    assert _failure(source) == f"choose_config(1999, 6144, 4096) {CANNOT_LAUNCH}"


def test_an_exception_on_a_rare_branch_is_caught_with_its_input_and_line() -> None:
    source = _with_branch("    if M % 1000 == 999:\n        return M // (M - M)\n")
    error = _failure(source)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "M // (M - M)" in text)
    assert error == (
        f"choose_config(999, 6144, 4096) raised ZeroDivisionError: "
        f"integer division or modulo by zero (line {line})"
    )


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("(64, 128, 64, M / M * 4, 3, 8)", "returned [64, 128, 64, 4.0, 3, 8]: num_warps must"),
        ("(64, 128, 64, M == M, 3, 8)", "returned [64, 128, 64, True, 3, 8]: num_warps must"),
        ("[64, 128, 64, 4, 3]", "returned [64, 128, 64, 4, 3]: expected 6 values, got 5"),
        ("{64, 128}", "returned a set: expected a list of 6 ints"),
        ("(64, 128, 64, 4, 3, float('inf'))", "returned a tuple holding a float: expected"),
    ],
)
def test_a_rare_answer_that_is_not_six_ints_is_caught(answer: str, reason: str) -> None:
    error = _failure(_with_branch(f"    if M == 4097 + 0 * N:\n        return {answer}\n"))
    assert error.startswith(f"choose_config(4097, 6144, 4096) {reason}")


# Rules that the projections and the fresh pairs on the 128 grid never reach: each returns a
# computed config that cannot launch, only on (N, K) the predicate holds for.
OFF_THE_GRID = [
    ("N % 128 != 0", lambda n, k: n % 128 != 0),
    ("K % 128 > 0 and K % 2 == 0", lambda n, k: k % 128 > 0 and k % 2 == 0),
    ("N % 2 == 1", lambda n, k: n % 2 == 1),
    ("K < 64", lambda n, k: k < 64),
    ("N < 16", lambda n, k: n < 16),
    ("N > 32768", lambda n, k: n > 32768),
    ("K > 16384", lambda n, k: k > 16384),
    ("N > 1 and all(N % d for d in range(2, int(N**0.5) + 1))", lambda n, k: _prime(n)),
]


def _prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


@pytest.mark.parametrize(("test", "holds"), OFF_THE_GRID, ids=[t for t, _ in OFF_THE_GRID])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_rule_only_shapes_off_the_projections_reach_is_caught(
    test: str, holds: Callable[[int, int], bool], seed: int
) -> None:
    rule = f"    if {test}:\n        return GemmConfig(M // M * 256, 256, 128, 4, 5, 8)\n"
    error = _failure(_with_branch(rule), seed)
    match = re.fullmatch(r"choose_config\((\d+), (\d+), (\d+)\) (.*)", error)
    assert match is not None, error
    assert holds(int(match[2]), int(match[3])), error
    assert match[4] == CANNOT_LAUNCH


def test_answers_that_change_after_the_grid_fail_as_impure() -> None:
    counter = "    CALLS[0] += 1\n    if CALLS[0] > 1000 and M <= 32:\n"
    rule = counter + "        return GemmConfig(32, 64, 64, 2, 4, 8)\n"
    source = INITIAL.replace("def choose_config(", "CALLS = [0]\n\n\ndef choose_config(")
    source = source.replace(FIRST_BRANCH, rule + FIRST_BRANCH, 1)
    error = _failure(source)
    assert re.fullmatch(
        r"choose_config\(\d+, \d+, \d+\) answered GemmConfig\(32, 64, 64, 2, 3, 8\) and then "
        r"GemmConfig\(32, 64, 64, 2, 4, 8\): it must be a pure function of \(M, N, K\)",
        error,
    ), error


def test_an_honest_computed_program_is_swept_and_passes() -> None:
    source = INITIAL.replace(
        "    if M <= 32:\n", "    tile = 32 if M <= 32 else 64\n    if M <= 32:\n"
    )
    result = _static(source)
    assert result.passed and result.score == 1.0, result.error
    assert int(result.artifacts["swept_shapes"]) >= len(SEEN_PAIRS) * DENSE_MAX_M
    # Not proven: the report says how many inputs it was tested on (every grid shape is swept).
    assert result.artifacts[LEGALITY] == TESTED
    assert result.artifacts[LEGALITY_INPUTS] == result.artifacts["swept_shapes"]


@pytest.mark.parametrize("path", KNOWN_GOOD, ids=lambda path: path.stem)
def test_known_good_programs_pass_without_a_sweep(path: Path) -> None:
    result = _static(path.read_text(encoding="utf-8"))
    assert result.passed, result.error
    assert result.artifacts["swept_shapes"] == "0"  # their answers are checked literals


def test_the_initial_program_passes_without_a_sweep() -> None:
    result = _static(INITIAL)
    assert result.passed and result.artifacts["swept_shapes"] == "0"
    # Proven for every input; the distinct shapes of the grid were asked as well.
    assert result.artifacts[LEGALITY] == PROVEN
    distinct = len(set(static_grid(np.random.default_rng(0), tiling_split())))
    assert result.artifacts[LEGALITY_INPUTS] == str(distinct)


def test_the_plan_covers_every_m_up_to_the_bound_for_every_projection() -> None:
    rng = np.random.default_rng(3)
    grid = static_grid(rng, tiling_split())
    parts = sweep_plan(grid, SEEN_PAIRS, rng)
    *projection_parts, fresh, odd = parts
    assert [(pair.n, pair.k) for (pair,) in projection_parts] == list(SEEN_PAIRS)
    for (pair,) in projection_parts:
        assert pair.dense_to == DENSE_MAX_M
        assert pair.extra and all(DENSE_MAX_M < m <= LARGE_MAX_M for m in pair.extra)
    grid_pairs = {(s.n, s.k) for s in grid} - set(SEEN_PAIRS)
    on_grid = {pair for pair in grid_pairs if on_the_grid(pair)}
    assert on_grid <= {(pair.n, pair.k) for pair in fresh}
    assert len(fresh) >= len(on_grid) + FRESH_PAIRS - 1  # a drawn pair may repeat one
    for pair in fresh:
        assert pair.dense_to == FRESH_DENSE_MAX_M and on_the_grid((pair.n, pair.k))
        assert any(m > DENSE_MAX_M for m in pair.extra)
    assert grid_pairs - on_grid <= {(pair.n, pair.k) for pair in odd}
    assert set(EDGE_PAIRS) <= grid_pairs
    assert len(odd) >= len(grid_pairs - on_grid) + ODD_PAIRS - 1
    for pair in odd:
        assert pair.dense_to == ODD_DENSE_MAX_M and not on_the_grid((pair.n, pair.k))
        assert any(m > DENSE_MAX_M for m in pair.extra)
    swept = [pair for part in parts for pair in part]
    for shape in grid:  # so that the sweep's answer to every grid shape is compared
        assert any((p.n, p.k) == (shape.n, shape.k) and p.asks(shape.m) for p in swept)
