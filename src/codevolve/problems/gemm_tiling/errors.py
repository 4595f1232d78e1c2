"""Errors of the gemm-tiling problem: broken invariants of its own data, never candidate faults."""

from codevolve.problems.errors import ProblemError


class GemmTilingError(ProblemError):
    """The problem's fixed data broke an invariant (e.g. a split left a regime empty)."""
