"""Exact verification of matmul tensor decompositions: the published anchors are accepted, every
corrupted copy is rejected, snapping rounds to the declared ring and the rank counts real terms.

The anchors (tests/data/anchors, reference data only; PROVENANCE.md there) are read here and
nowhere in the problem.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from codevolve.problems.matmul_tensor.exact import (
    ExactMatrix,
    Factors,
    Ring,
    SnapError,
    exact_from_array,
    in_ring,
    snap,
    verify,
)
from codevolve.problems.matmul_tensor.tensor import BEST_KNOWN_RANK, Size, matmul_tensor

ANCHORS = Path(__file__).resolve().parents[3] / "data" / "anchors"  # a copy of the published data
REAL = ANCHORS / "alphatensor" / "factorizations_r.npz"
MOD2 = ANCHORS / "alphatensor" / "factorizations_f2.npz"
EVOLVE = ANCHORS / "alphaevolve" / "alphaevolve_decompositions.npz"
SMALL_WORK = 2_000_000  # tensor entries x rank of the anchors checked in the fast test


@functools.cache
def _anchors(max_work: int | None = None) -> list[tuple[str, Size, Factors, Ring]]:
    """(source, size, factors, ring) of the published decompositions: all 128, or those whose
    tensor entries x rank are at most ``max_work``."""

    def small(size: Size, rank: int) -> bool:
        rows = size.shape
        return max_work is None or rows[0] * rows[1] * rows[2] * rank <= max_work

    out: list[tuple[str, Size, Factors, Ring]] = []
    for path, ring in ((REAL, Ring.DYADIC), (MOD2, Ring.GF2)):
        with np.load(path, allow_pickle=True) as data:  # object arrays of (U, V, W)
            for key in data.files:
                u, v, w = data[key]
                if small(Size.parse(key), u.shape[1]):
                    factors = (exact_from_array(u), exact_from_array(v), exact_from_array(w))
                    out.append((path.stem, Size.parse(key), factors, ring))
    with np.load(EVOLVE) as data:
        for key in sorted({name[2:] for name in data.files}):
            if small(Size.parse(key), data[f"U_{key}"].shape[1]):
                mats = tuple(exact_from_array(data[f"{c}_{key}"]) for c in "UVW")
                out.append(
                    ("alphaevolve", Size.parse(key), (mats[0], mats[1], mats[2]), Ring.GAUSSIAN)
                )
    return out


def _corrupted(factors: Factors, rng: np.random.Generator) -> Factors:
    """One coefficient of one factor changed by one unit (of its denominator)."""
    which = int(rng.integers(3))
    matrix = factors[which]
    re = matrix.re.copy()
    row, col = int(rng.integers(re.shape[0])), int(rng.integers(re.shape[1]))
    re[row, col] += 1
    changed = list(factors)
    changed[which] = ExactMatrix(re, matrix.im, matrix.den)
    return changed[0], changed[1], changed[2]


def _check_all(selected: list[tuple[str, Size, Factors, Ring]]) -> None:
    rng = np.random.default_rng(0)
    for source, size, factors, ring in selected:
        verdict = verify(size, factors, ring=ring)
        assert verdict.exact, (source, size)
        assert verdict.rank <= factors[0].shape[1]
        bad = verify(size, _corrupted(factors, rng), ring=ring)
        assert not bad.exact and bad.wrong_entries > 0, (source, size)


def test_small_anchors_are_exact_and_corrupted_copies_are_not() -> None:
    selected = _anchors(SMALL_WORK)
    assert len(selected) >= 60
    assert {source for source, *_ in selected} == {
        "factorizations_r",
        "factorizations_f2",
        "alphaevolve",
    }
    _check_all(selected)


@pytest.mark.slow
def test_all_128_anchors_are_exact_and_corrupted_copies_are_not() -> None:
    anchors = _anchors()
    assert len(anchors) == 128
    _check_all(anchors)


def test_published_ranks_match_the_best_known_table() -> None:
    wanted = {Size(2, 2, 2), Size(3, 3, 3), Size(4, 4, 4)}
    by_size = {
        (source, size): verify(size, f, ring=ring).rank
        for source, size, f, ring in _anchors(SMALL_WORK)
        if size in wanted
    }
    assert by_size[("factorizations_r", Size(2, 2, 2))] == 7
    assert by_size[("factorizations_r", Size(3, 3, 3))] == BEST_KNOWN_RANK[Size(3, 3, 3)]
    assert by_size[("factorizations_r", Size(4, 4, 4))] == BEST_KNOWN_RANK[Size(4, 4, 4)]
    assert by_size[("alphaevolve", Size(4, 4, 4))] == 48


def test_rings_gate_exactness() -> None:
    anchors = {(s, size): (f, r) for s, size, f, r in _anchors(SMALL_WORK)}
    complex_444, _ = anchors[("alphaevolve", Size(4, 4, 4))]
    assert not verify(Size(4, 4, 4), complex_444, ring=Ring.DYADIC).exact  # needs i
    mod2_444, _ = anchors[("factorizations_f2", Size(4, 4, 4))]
    assert verify(Size(4, 4, 4), mod2_444, ring=Ring.GF2).exact
    assert not verify(Size(4, 4, 4), mod2_444, ring=Ring.INTEGERS).exact  # only valid mod 2
    strassen, _ = anchors[("factorizations_r", Size(2, 2, 2))]
    assert in_ring(strassen, Ring.TERNARY)
    assert verify(Size(2, 2, 2), strassen, ring=Ring.TERNARY).exact


def _naive(size: Size) -> list[list[list[float]]]:
    """The schoolbook algorithm in the convention: one term per (i, j, k)."""
    a, b, c = size.shape
    u, v, w = (
        np.zeros((a, size.naive_rank)),
        np.zeros((b, size.naive_rank)),
        np.zeros((c, size.naive_rank)),
    )
    r = 0
    for i in range(size.n):
        for j in range(size.m):
            for k in range(size.p):
                u[i * size.m + j, r] = v[j * size.p + k, r] = w[k * size.n + i, r] = 1
                r += 1
    return [u.tolist(), v.tolist(), w.tolist()]


def test_tensor_convention_matches_the_formula() -> None:
    size = Size(2, 3, 4)
    tensor = matmul_tensor(size)
    assert tensor.shape == (6, 12, 8) and tensor.sum() == size.naive_rank
    assert tensor[1 * 3 + 2, 2 * 4 + 3, 3 * 2 + 1] == 1  # A[1,2] B[2,3] -> C[1,3]


def test_snapping_rounds_noisy_factors_to_an_exact_naive_decomposition() -> None:
    size = Size(2, 2, 3)
    noisy = [
        (np.asarray(m) + np.random.default_rng(1).uniform(-0.4, 0.4, np.shape(m))).tolist()
        for m in _naive(size)
    ]
    factors = snap(noisy, size, Ring.INTEGERS, max_rank=24)
    verdict = verify(size, factors, ring=Ring.INTEGERS)
    assert verdict.exact and verdict.rank == 12 and verdict.residual == 0


def test_rank_counts_only_terms_with_three_nonzero_factors() -> None:
    size = Size(2, 2, 2)
    u, v, w = _naive(size)
    for matrix in (u, v, w):
        for row in matrix:
            row.append(0.0)
    u[0][-1] = 1.0  # a ninth column with zero V and W contributes nothing
    verdict = verify(size, snap([u, v, w], size, Ring.INTEGERS, max_rank=16))
    assert verdict.exact and verdict.rank == 8


def test_a_missing_term_is_graded_by_its_residual() -> None:
    size = Size(2, 2, 2)
    u, v, w = (np.asarray(m)[:, :7].tolist() for m in _naive(size))
    verdict = verify(size, snap([u, v, w], size, Ring.INTEGERS, max_rank=16))
    assert not verdict.exact and verdict.wrong_entries == 1 and verdict.residual == 1.0


def test_snapping_to_the_rings() -> None:
    size = Size(1, 1, 1)
    assert snap([[[2.6]], [[1.0]], [[1.0]]], size, Ring.TERNARY, max_rank=2)[0].re[0, 0] == 1
    half = snap([[[0.49]], [[2.0]], [[1.0]]], size, Ring.HALF_INTEGERS, max_rank=2)
    assert (half[0].re[0, 0], half[0].den) == (1, 2)
    assert verify(size, half, ring=Ring.HALF_INTEGERS).exact
    assert not verify(size, half, ring=Ring.INTEGERS).exact  # a half is outside Z
    gauss = snap([[[[0.0, 1.02]]], [[[0.0, -1.0]]], [[1.0]]], size, Ring.GAUSSIAN, max_rank=2)
    assert verify(size, gauss, ring=Ring.GAUSSIAN).exact  # i * (-i) = 1
    assert snap([[[3.0]], [[1.0]], [[1.0]]], size, Ring.GF2, max_rank=2)[0].re[0, 0] == 1


@pytest.mark.parametrize(
    "value",
    [
        "nope",
        [[[1.0]], [[1.0]]],
        [[[1.0]], [[1.0]], [[1.0, 1.0]]],
        [[[1.0, 2.0]], [[1.0]], [[1.0]]],
        [[[float("nan")]], [[1.0]], [[1.0]]],
        [[[1e9]], [[1.0]], [[1.0]]],
        [[["x"]], [[1.0]], [[1.0]]],
    ],
)
def test_malformed_answers_raise_snap_errors(value: object) -> None:
    with pytest.raises(SnapError):
        snap(value, Size(1, 1, 1), Ring.INTEGERS, max_rank=1)


def test_large_coefficients_are_checked_in_python_integers() -> None:
    size = Size(1, 1, 1)
    big = 2**19
    factors = snap([[[big]], [[big]], [[1.0]]], size, Ring.INTEGERS, max_rank=1)
    assert not verify(size, factors).exact
    exact = (exact_from_array([[1.0]]), exact_from_array([[1.0]]), exact_from_array([[1.0]]))
    assert verify(size, exact).exact
