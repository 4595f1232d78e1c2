"""A verified decomposition as an algorithm: its R products and how C is formed from them.

With A (n x m), B (m x p) and factors U, V, W in the convention of tensor.py::

    h_r     = (sum_ij U[i*m + j, r] A[i, j]) * (sum_jk V[j*p + k, r] B[j, k])
    C[i, k] = sum_r W[k*n + i, r] h_r

``multiply`` runs exactly that, so a test can compare it with A @ B on random matrices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from codevolve.problems.matmul_tensor.exact import (
    ExactMatrix,
    Factors,
    Ring,
    SnapError,
    exact_from_array,
    verify,
)
from codevolve.problems.matmul_tensor.tensor import Size

Coefficient = Fraction | tuple[Fraction, Fraction]


@dataclass(frozen=True, slots=True)
class Decomposition:
    size: Size
    factors: Factors

    @property
    def rank(self) -> int:
        u, v, w = self.factors
        return int(np.sum(u.nonzero_columns() & v.nonzero_columns() & w.nonzero_columns()))

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> Decomposition:
        """From the ``factors_<size>`` artifact a stage stores: size, U, V, W (ints, "a/b"
        strings, or [re, im] pairs)."""
        data = json.loads(text) if isinstance(text, str) else text
        size = Size(*(int(x) for x in data["size"]))
        mats = tuple(_matrix(data[name]) for name in ("U", "V", "W"))
        return cls(size, (mats[0], mats[1], mats[2]))

    def to_json(self) -> dict[str, Any]:
        u, v, w = self.factors
        return {
            "size": [self.size.n, self.size.m, self.size.p],
            "rank": self.rank,
            "U": u.to_json(),
            "V": v.to_json(),
            "W": w.to_json(),
        }


def _matrix(rows: list[list[Any]]) -> ExactMatrix:
    def number(x: Any) -> complex:
        if isinstance(x, list):
            return complex(float(Fraction(x[0])), float(Fraction(x[1])))
        return complex(float(Fraction(x)))

    # Entries are dyadic (ints or halves), so the floats are exact and exact_from_array keeps them.
    array = np.asarray([[number(x) for x in row] for row in rows], dtype=np.complex128)
    if not np.any(array.imag):
        return exact_from_array(array.real)
    return exact_from_array(array)


def _coefficient_text(value: Coefficient) -> str:
    if isinstance(value, tuple):
        real, imag = value
        if imag == 0:
            return str(real)
        if real == 0:
            return f"{imag}i"
        return f"({real}{'+' if imag > 0 else '-'}{abs(imag)}i)"
    return str(value)


def _linear_form(matrix: ExactMatrix, col: int, names: list[str]) -> str:
    terms: list[str] = []
    for row, name in enumerate(names):
        value = matrix.entry(row, col)
        if isinstance(value, tuple) and value[1] == 0:
            value = value[0]
        if value == 0 or value == (0, 0):
            continue
        if value == 1 or value == (1, 0):
            terms.append(f"+ {name}")
        elif value == -1 or value == (-1, 0):
            terms.append(f"- {name}")
        elif isinstance(value, Fraction) and value < 0:
            terms.append(f"- {-value}*{name}")
        elif isinstance(value, tuple) and value[0] == 0 and value[1] < 0:
            terms.append(f"- {-value[1]}i*{name}")
        else:
            terms.append(f"+ {_coefficient_text(value)}*{name}")
    text = " ".join(terms)
    return text[2:] if text.startswith("+ ") else text or "0"


def readable(decomposition: Decomposition) -> dict[str, list[str]]:
    """``products``: ``h_r = (form of A) * (form of B)``; ``outputs``: ``C[i,k] = sum of h``."""
    size, (u, v, w) = decomposition.size, decomposition.factors
    n, m, p = size.n, size.m, size.p
    a_names = [f"A[{i},{j}]" for i in range(n) for j in range(m)]
    b_names = [f"B[{j},{k}]" for j in range(m) for k in range(p)]
    used = u.nonzero_columns() & v.nonzero_columns() & w.nonzero_columns()
    columns = [int(c) for c in np.flatnonzero(used)]
    h_names = [f"h{index + 1}" for index in range(len(columns))]
    products = [
        f"{name} = ({_linear_form(u, col, a_names)}) * ({_linear_form(v, col, b_names)})"
        for name, col in zip(h_names, columns, strict=True)
    ]
    # Row k*n + i of W belongs to C[i, k]; read W transposed to reuse _linear_form.
    w_rows = ExactMatrix(w.re[:, columns].T, None if w.im is None else w.im[:, columns].T, w.den)
    outputs = []
    for i in range(n):
        for k in range(p):
            outputs.append(f"C[{i},{k}] = {_linear_form(w_rows, k * n + i, h_names)}")
    return {"products": products, "outputs": outputs}


def multiply(
    decomposition: Decomposition, a: npt.NDArray[Any], b: npt.NDArray[Any]
) -> npt.NDArray[Any]:
    """C = A B computed with the decomposition's products (floating point, for checking)."""
    size, (u, v, w) = decomposition.size, decomposition.factors
    if a.shape != (size.n, size.m) or b.shape != (size.m, size.p):
        raise SnapError(f"A, B must be {size.n}x{size.m} and {size.m}x{size.p}")
    h = (u.as_complex().T @ a.reshape(-1)) * (v.as_complex().T @ b.reshape(-1))
    c_transposed = w.as_complex() @ h  # index k*n + i
    c = c_transposed.reshape(size.p, size.n).T
    return np.real_if_close(c)


def check_on_random(
    decomposition: Decomposition, rng: np.random.Generator, *, trials: int = 3
) -> float:
    """The largest |multiply(A, B) - A @ B| over random Gaussian A, B (about 1e-15 if right)."""
    size = decomposition.size
    worst = 0.0
    for _ in range(trials):
        a = rng.standard_normal((size.n, size.m))
        b = rng.standard_normal((size.m, size.p))
        worst = max(worst, float(np.max(np.abs(multiply(decomposition, a, b) - a @ b))))
    return worst


def is_exact(decomposition: Decomposition, ring: Ring = Ring.GAUSSIAN) -> bool:
    return verify(decomposition.size, decomposition.factors, ring=ring).exact
