"""Decompositions read as algorithms: the products and outputs are printed, and running them on
random matrices gives A @ B (Strassen, a complex <4,4,4> one, and the schoolbook algorithm)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from codevolve.problems.matmul_tensor.algorithm import (
    Decomposition,
    check_on_random,
    is_exact,
    multiply,
    readable,
)
from codevolve.problems.matmul_tensor.exact import ExactMatrix, exact_from_array
from codevolve.problems.matmul_tensor.tensor import Size

ANCHORS = Path(__file__).resolve().parents[3] / "data" / "anchors"  # a copy of the published data


def _anchor(path: str, key: str, *, pickled: bool = True) -> Decomposition:
    with np.load(ANCHORS / path, allow_pickle=pickled) as data:
        if pickled:
            u, v, w = data[key]
        else:
            u, v, w = (data[f"{c}_{key}"] for c in "UVW")
    factors = (exact_from_array(u), exact_from_array(v), exact_from_array(w))
    return Decomposition(Size.parse(key), factors)


def _schoolbook(size: Size) -> Decomposition:
    a, b, c = size.shape
    u, v, w = (np.zeros((rows, size.naive_rank), dtype=np.int64) for rows in (a, b, c))
    r = 0
    for i in range(size.n):
        for j in range(size.m):
            for k in range(size.p):
                u[i * size.m + j, r] = v[j * size.p + k, r] = w[k * size.n + i, r] = 1
                r += 1
    return Decomposition(
        size, (ExactMatrix(u, None, 1), ExactMatrix(v, None, 1), ExactMatrix(w, None, 1))
    )


def test_strassen_reads_as_seven_products_and_multiplies_correctly() -> None:
    strassen = _anchor("alphatensor/factorizations_r.npz", "2,2,2")
    text = readable(strassen)
    assert len(text["products"]) == 7 and len(text["outputs"]) == 4
    assert text["products"][0].startswith("h1 = (") and "A[" in text["products"][0]
    assert all(
        line.startswith(f"C[{i},{k}] = ")
        for line, (i, k) in zip(text["outputs"], [(0, 0), (0, 1), (1, 0), (1, 1)], strict=True)
    )
    assert check_on_random(strassen, np.random.default_rng(0)) < 1e-12


def test_complex_rank_48_algorithm_multiplies_4x4_matrices() -> None:
    alg = _anchor("alphaevolve/alphaevolve_decompositions.npz", "4,4,4", pickled=False)
    assert alg.rank == 48 and is_exact(alg)
    first = readable(alg)["products"][0]
    assert "(1/2+1/2i)*A[0,0]" in first and "- 1/2i*B[3,0]" in first
    assert check_on_random(alg, np.random.default_rng(1)) < 1e-12


def test_rectangular_schoolbook_matches_numpy_and_round_trips_through_json() -> None:
    alg = _schoolbook(Size(2, 3, 4))
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    assert np.allclose(multiply(alg, a, b), a @ b)
    again = Decomposition.from_json(json.dumps(alg.to_json()))
    assert again.rank == 24 and is_exact(again)
    assert readable(again) == readable(alg)


def test_a_wrong_algorithm_is_caught_by_the_random_check() -> None:
    alg = _schoolbook(Size(2, 2, 2))
    w = alg.factors[2].re.copy()
    w[0, 0] = 0
    broken = Decomposition(alg.size, (alg.factors[0], alg.factors[1], ExactMatrix(w, None, 1)))
    assert not is_exact(broken)
    assert check_on_random(broken, np.random.default_rng(3)) > 1e-3
