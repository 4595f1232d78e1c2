"""The tests the gemm-tiling mutations write, and the ladders their thresholds lie on.

New rules test octave ranges of the output size ``M * N`` (:func:`directed_test`,
:func:`random_test`), on the GPU problem some also a band of M, the token count
(:func:`token_band`; docs/gemm_tiling.md says why). A threshold moves along its ladder: powers
of two for M, octaves for ``M * N``, the benchmark's values for N and K.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.random import Generator

from codevolve.problems.gemm_tiling.rule_tests import Shape

M_THRESHOLDS = tuple(2**i for i in range(14))  # 1 .. 8192
# Thresholds of the output size M * N (elements of y): it decides how many tiles there are and so
# how the waves fill the SMs, which carries over from one projection to another where a test of N
# alone does not.
MN_THRESHOLDS = tuple(2**i for i in range(10, 29))  # 1024 .. 2**28
OUTPUT_SIZE = "M * N"
NK_THRESHOLDS = (1024, 1280, 3584, 4096, 6144, 7168, 8192, 14336, 28672)
WIDEN_SHARE = 0.5  # how often a directed rule's octave is widened by one below (or above)


def directed_test(shape: Shape, rng: Generator, sizes: Sequence[int] = ()) -> str:
    """The octave of the output size ``M * N`` that holds the shape, ``2**i < M * N <= 2**(i+1)``,
    sometimes widened by an octave below or above, so the rule carries over to the other
    projections of that size and never targets one shape. A range with none of the scored
    ``sizes`` above it (below it) stays open upward (downward): past the largest (smallest) size
    the score shows, the nearest regime is the best guess. Bounds lie on ``MN_THRESHOLDS``."""
    size = shape[0] * shape[1]
    low = max((v for v in MN_THRESHOLDS if v < size), default=None)
    high = min((v for v in MN_THRESHOLDS if v >= size), default=None)
    if rng.random() < WIDEN_SHARE and low is not None:
        low = below(low, MN_THRESHOLDS) or low
    if rng.random() < WIDEN_SHARE and high is not None:
        high = min((v for v in MN_THRESHOLDS if v > high), default=high)
    # Octaves between the range and the nearest scored sizes hold no scored shape: the range
    # reaches over them, so the sizes the score never shows get the nearest regime's config.
    under = max((s for s in sizes if s <= (low or 0)), default=None)
    over = min((s for s in sizes if s > (high or 2**62)), default=None)
    if low is not None and under is not None:
        low = min((v for v in MN_THRESHOLDS if v >= under), default=low)
    if high is not None and over is not None:
        high = max((v for v in MN_THRESHOLDS if v < over), default=high)
    if low is not None and (high is None or (sizes and all(s <= high for s in sizes))):
        return f"M * N > {low}"
    if high is not None and (low is None or (sizes and all(s > low for s in sizes))):
        return f"M * N <= {high}"
    return f"M * N > {low} and M * N <= {high}"


def token_band(m: int, rng: Generator) -> str:
    """A test of M around ``m`` on the powers of two: above the one below it, at most the one at
    or above it, or both. Within one output-size octave, ``M > 16`` keeps the narrow projections'
    prefill shapes and ``M <= 16`` the wide projections' decode shapes."""
    low = below(m, M_THRESHOLDS)  # None for M = 1
    high = min((v for v in M_THRESHOLDS if v >= m), default=None)  # None past 8192
    forms = [f"M > {low}"] if low is not None else []
    forms += [f"M <= {high}"] if high is not None else []
    if len(forms) == 2:
        forms.append(" and ".join(forms))
    return forms[int(rng.integers(len(forms)))]


def random_test(rng: Generator) -> str:
    """A range of the output size one to three octaves wide, or everything above or below it."""
    top = int(rng.integers(1, len(MN_THRESHOLDS)))
    low = MN_THRESHOLDS[top - int(rng.integers(1, min(3, top) + 1))]
    return _output_size_test(low, MN_THRESHOLDS[top], rng)


def _output_size_test(low: int, high: int, rng: Generator) -> str:
    """A test of the output size: at most ``high``, above ``low``, or between the two."""
    form = _choice(("le", "range", "gt"), (1, 4, 1), rng)
    return {
        "le": f"M * N <= {high}",
        "range": f"M * N > {low} and M * N <= {high}",
        "gt": f"M * N > {low}",
    }[form]


def _choice(options: Sequence[str], weights: Sequence[float], rng: Generator) -> str:
    p = np.asarray(weights, dtype=float)
    return options[int(rng.choice(len(options), p=p / p.sum()))]


def below(value: int, ladder: Sequence[int]) -> int | None:
    """The largest rung of the ladder under ``value``, or None when there is none."""
    return max((v for v in ladder if v < value), default=None)
