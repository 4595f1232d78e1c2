"""Coefficient rings, snapping and exact verification of decompositions.

Factors are held as integer numerators over one denominator per factor (and an imaginary part for
the Gaussian ring), so ``sum_r u_r (x) v_r (x) w_r = T`` is checked in integer arithmetic: either
in float64, which is exact for integers while every partial sum stays below 2**53 (the bound is
checked first), or else in Python integers. Nothing is ever compared with a tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from codevolve.problems.matmul_tensor.tensor import Size, matmul_tensor

EXACT_FLOAT_LIMIT = 2**53  # integers of float64 are exact below this
MAX_ENTRY = 2**20  # larger coefficients are rejected when snapping: never useful, risk overflow
IntArray = npt.NDArray[Any]  # int64, or object (Python ints) when the values are large


class Ring(StrEnum):
    """Where coefficients live."""

    INTEGERS = "integers"
    TERNARY = "ternary"  # {-1, 0, 1}
    HALF_INTEGERS = "half-integers"  # Z / 2
    DYADIC = "dyadic"  # Z[1/2]: any power of two as denominator
    GAUSSIAN = "gaussian"  # a + b i with a, b dyadic
    GF2 = "gf2"  # integers modulo 2


@dataclass(frozen=True, slots=True)
class ExactMatrix:
    """``(re + i * im) / den`` with integer ``re``, ``im`` (None: real) and ``den`` >= 1."""

    re: IntArray
    im: IntArray | None
    den: int

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = self.re.shape
        return int(rows), int(cols)

    def nonzero_columns(self) -> npt.NDArray[np.bool_]:
        nonzero = np.any(self.re != 0, axis=0)
        if self.im is not None:
            nonzero |= np.any(self.im != 0, axis=0)
        return np.asarray(nonzero, dtype=np.bool_)

    def entry(self, row: int, col: int) -> Fraction | tuple[Fraction, Fraction]:
        """One coefficient exactly: a Fraction, or (re, im) Fractions in the Gaussian case."""
        real = Fraction(int(self.re[row, col]), self.den)
        if self.im is None:
            return real
        return (real, Fraction(int(self.im[row, col]), self.den))

    def to_json(self) -> list[list[Any]]:
        """Entries as ints where integral, "a/b" strings otherwise; [re, im] pairs if complex."""
        rows, cols = self.shape

        def text(value: Fraction) -> int | str:
            return value.numerator if value.denominator == 1 else str(value)

        out: list[list[Any]] = []
        for row in range(rows):
            line: list[Any] = []
            for col in range(cols):
                real = Fraction(int(self.re[row, col]), self.den)
                if self.im is None:
                    line.append(text(real))
                else:
                    line.append([text(real), text(Fraction(int(self.im[row, col]), self.den))])
            out.append(line)
        return out

    def as_complex(self) -> npt.NDArray[np.complex128] | npt.NDArray[np.float64]:
        real = self.re.astype(np.float64) / self.den
        if self.im is None:
            return np.asarray(real, dtype=np.float64)
        return np.asarray(real + 1j * self.im.astype(np.float64) / self.den)


Factors = tuple[ExactMatrix, ExactMatrix, ExactMatrix]


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a decomposition compares with T: exact or not, its rank, how far off it is."""

    exact: bool
    rank: int  # terms whose three factors are all nonzero
    wrong_entries: int  # entries of the reconstruction that differ from T
    residual: float  # sum of |reconstruction - T| over all entries (mod 2: wrong entries)


class SnapError(ValueError):
    """The candidate's numbers are not a decomposition of the right shape."""


# ------------------------------------------------------------------- snapping


def snap(value: Any, size: Size, ring: Ring, *, max_rank: int) -> Factors:
    """Plain lists [U, V, W] from a candidate, rounded to the nearest ring elements.

    Real rings take numbers; the Gaussian ring also takes [re, im] pairs. Raises SnapError with a
    short reason when shapes, types or magnitudes are wrong.
    """
    if not isinstance(value, list | tuple) or len(value) != 3:
        raise SnapError("expected [U, V, W]")
    rows = size.shape
    mats = [_float_matrix(part, rows[i], "UVW"[i], ring) for i, part in enumerate(value)]
    ranks = {re.shape[1] for re, _ in mats}
    if len(ranks) != 1:
        raise SnapError(f"U, V, W have different column counts {sorted(ranks)}")
    if ranks.pop() > max_rank:
        raise SnapError(f"more than {max_rank} columns")
    snapped = [_snap_matrix(re, im, ring) for re, im in mats]
    return snapped[0], snapped[1], snapped[2]


def _float_matrix(
    part: Any, rows: int, name: str, ring: Ring
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64] | None]:
    try:
        array = np.asarray(part, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise SnapError(f"{name} is not a matrix of numbers") from exc
    im: npt.NDArray[np.float64] | None = None
    if array.ndim == 3 and array.shape[-1] == 2 and ring is Ring.GAUSSIAN:
        array, im = array[..., 0], array[..., 1]
    if array.ndim != 2 or array.shape[0] != rows:
        raise SnapError(f"{name} has shape {array.shape}, expected ({rows}, rank)")
    for part_array in (array, im):
        if part_array is not None and not np.all(np.isfinite(part_array)):
            raise SnapError(f"{name} has a non-finite entry")
        if part_array is not None and np.abs(part_array).max(initial=0.0) > MAX_ENTRY:
            raise SnapError(f"{name} has an entry above {MAX_ENTRY} in magnitude")
    return array, im


def _snap_matrix(
    re: npt.NDArray[np.float64], im: npt.NDArray[np.float64] | None, ring: Ring
) -> ExactMatrix:
    if ring in (Ring.HALF_INTEGERS, Ring.DYADIC, Ring.GAUSSIAN):
        # Snapping to finer dyadics than halves would let any float through: halves it is.
        real = np.rint(2 * re).astype(np.int64)
        imag = None if im is None or ring is not Ring.GAUSSIAN else np.rint(2 * im).astype(np.int64)
        return _reduced(real, imag, 2)
    real = np.rint(re).astype(np.int64)
    if ring is Ring.TERNARY:
        real = np.clip(real, -1, 1)
    elif ring is Ring.GF2:
        real = np.mod(real, 2)
    return ExactMatrix(real, None, 1)


def _reduced(re: IntArray, im: IntArray | None, den: int) -> ExactMatrix:
    """Divide out the common factor of the entries and the denominator."""
    common = den
    for array in (re, im):
        if array is not None:
            for value in np.unique(array):
                common = math.gcd(common, int(value))
    common = max(common, 1)
    if common == 1:
        return ExactMatrix(re, im, den)
    return ExactMatrix(re // common, None if im is None else im // common, den // common)


def exact_from_array(array: npt.ArrayLike) -> ExactMatrix:
    """A published factor (floats, ints or complex holding dyadic values) held exactly.

    Scaling a float by a power of two is exact, so the denominator is the least power of two
    that makes every entry integral; a non-dyadic entry raises SnapError.
    """
    values = np.asarray(array)
    real = np.real(values).astype(np.float64)
    imag = np.imag(values).astype(np.float64) if np.iscomplexobj(values) else None
    parts = [real] if imag is None else [real, imag]
    if not all(
        np.all(np.isfinite(part)) and np.abs(part).max(initial=0.0) < 2**52 for part in parts
    ):
        raise SnapError("entries must be finite and below 2**52")
    for exponent in range(64):
        den = 2**exponent
        scaled = [part * den for part in parts]
        if all(np.all(np.rint(part) == part) for part in scaled) and all(
            np.abs(part).max(initial=0.0) < 2**62 for part in scaled
        ):
            ints = [np.rint(part).astype(np.int64) for part in scaled]
            return _reduced(ints[0], ints[1] if imag is not None else None, den)
    raise SnapError("an entry is not a dyadic rational of small denominator")


def in_ring(factors: Factors, ring: Ring) -> bool:
    """Whether every coefficient lies in ``ring``."""
    for matrix in factors:
        has_imag = matrix.im is not None and bool(np.any(matrix.im != 0))
        if has_imag and ring is not Ring.GAUSSIAN:
            return False
        den = matrix.den
        if ring in (Ring.INTEGERS, Ring.TERNARY, Ring.GF2) and den != 1:
            return False
        if ring is Ring.HALF_INTEGERS and den not in (1, 2):
            return False
        if ring in (Ring.DYADIC, Ring.GAUSSIAN) and den & (den - 1):
            return False
        if ring is Ring.TERNARY and np.abs(matrix.re).max(initial=0) > 1:
            return False
    return True


# ------------------------------------------------------------------- verification


def verify(size: Size, factors: Factors, *, ring: Ring = Ring.DYADIC) -> Verdict:
    """Compare ``sum_r u_r (x) v_r (x) w_r`` with T exactly (over Z/2 when ``ring`` is GF2).

    A decomposition with a coefficient outside ``ring`` is never exact.
    """
    u, v, w = factors
    for matrix, rows in zip(factors, size.shape, strict=True):
        if matrix.shape[0] != rows:
            raise SnapError(f"a factor has {matrix.shape[0]} rows, expected {rows}")
    if not u.shape[1] == v.shape[1] == w.shape[1]:
        raise SnapError("factors have different column counts")
    rank = int(np.sum(u.nonzero_columns() & v.nonzero_columns() & w.nonzero_columns()))
    scale = u.den * v.den * w.den
    re, im = _reconstruct(u, v, w)
    target = matmul_tensor(size).astype(object if re.dtype == object else np.int64) * scale
    diff_re = re - target
    if ring is Ring.GF2:
        wrong = np.count_nonzero(np.mod(diff_re, 2)) if scale == 1 else diff_re.size
        if im is not None and np.any(im != 0):
            wrong = diff_re.size
        return Verdict(
            exact=wrong == 0 and in_ring(factors, ring),
            rank=rank,
            wrong_entries=int(wrong),
            residual=float(wrong),
        )
    off = diff_re != 0
    residual = float(np.sum(np.abs(diff_re))) / scale
    if im is not None:
        off |= im != 0
        residual += float(np.sum(np.abs(im))) / scale
    wrong = int(np.count_nonzero(off))
    return Verdict(
        exact=wrong == 0 and in_ring(factors, ring),
        rank=rank,
        wrong_entries=wrong,
        residual=residual,
    )


def _reconstruct(
    u: ExactMatrix, v: ExactMatrix, w: ExactMatrix
) -> tuple[IntArray, IntArray | None]:
    """Numerators of sum_r u_r (x) v_r (x) w_r: real part and imaginary part (None if real)."""
    shape = (u.shape[0], v.shape[0], w.shape[0])
    complex_case = any(x.im is not None for x in (u, v, w))

    def parts(x: ExactMatrix) -> tuple[IntArray, IntArray]:
        return x.re, (x.im if x.im is not None else np.zeros_like(x.re))

    (ur, ui), (vr, vi), (wr, wi) = parts(u), parts(v), parts(w)
    bound = 4 * max(u.shape[1], 1)
    for a, b in ((ur, ui), (vr, vi), (wr, wi)):
        bound *= max(_max_abs(a), _max_abs(b), 1)
    exact_in_float = bound < EXACT_FLOAT_LIMIT

    def product(a: IntArray, b: IntArray, c: IntArray) -> IntArray:
        if exact_in_float:
            kr = (b.astype(np.float64)[:, None, :] * c.astype(np.float64)[None, :, :]).reshape(
                -1, b.shape[1]
            )
            return np.rint(a.astype(np.float64) @ kr.T).astype(np.int64).reshape(shape)
        kr_obj = (b.astype(object)[:, None, :] * c.astype(object)[None, :, :]).reshape(
            -1, b.shape[1]
        )
        return np.asarray(a.astype(object) @ kr_obj.T, dtype=object).reshape(shape)

    if not complex_case:
        return product(ur, vr, wr), None
    # (ur + i ui)(vr + i vi)(wr + i wi), expanded.
    real = product(ur, vr, wr) - product(ur, vi, wi) - product(ui, vr, wi) - product(ui, vi, wr)
    imag = product(ui, vr, wr) + product(ur, vi, wr) + product(ur, vr, wi) - product(ui, vi, wi)
    return real, imag


def _max_abs(array: IntArray) -> int:
    if array.size == 0:
        return 0
    return int(max(abs(int(array.max())), abs(int(array.min()))))
