"""matmul-tensor: evolve a search program for low-rank decompositions of matmul tensors.

Task. ``find_decomposition(n, m, p, rank, seed, time_budget_s)`` returns factors [U, V, W] as
plain lists of numbers for the <n,m,p> matrix multiplication tensor in the AlphaTensor convention
(tensor.py): T has shape (n*m, m*p, p*n), ``T[i*m + j, j*p + k, k*n + i] = 1``, and
``sum_r U[:, r] (x) V[:, r] (x) W[:, r] = T`` must hold exactly. A rank-R decomposition is an
algorithm with R multiplications: ``C[i, k] = sum_r W[k*n + i, r] (U[:, r] . vec A)
(V[:, r] . vec B)``. Strassen's is rank 7 for <2,2,2>; 23 is the best known for <3,3,3>, 49 for
<4,4,4> over the integers (48 with complex coefficients).

Metric. Outside the candidate's process, every answer is rounded to the integers (the ring is a
parameter: also {-1, 0, 1}, half-integers, Gaussian half-integers or GF(2), exact.py) and checked
in exact integer arithmetic; the rank is the number of nonzero terms. Per size, an exact answer
scores ``1 + (naive - rank) / (naive - best_known)`` (2 at the best known rank) and an inexact
one a graded ``0.99 * nnz(T) / (nnz(T) + residual)``. The program's score is the mean over the eight
sizes <2,2,2>, <2,2,3>, <2,2,4>, <2,3,3>, <2,3,4>, <3,3,3>, <3,3,4>, <4,4,4>.

Cascade (stages.py): <2,2,2> (3 s; a child keeps 90% of its parent's score there), the mid sizes
(2.5 s each, 8 s for <3,3,3>), <4,4,4> (8 s). The initial program is Adam on the L2
reconstruction loss followed by rounding; it finds no exact decomposition. Features for
MAP-Elites: sizes solved exactly, and the share of nonzero coefficients in the largest answer.
No held-out split: an exact decomposition is verified, not estimated.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace
from importlib import resources

from codevolve.core.problem import FeatureSpec, Mutation, ProblemSpec
from codevolve.problems.matmul_tensor.exact import Ring
from codevolve.problems.matmul_tensor.stages import (
    LARGE,
    MID,
    TINY,
    TINY_THRESHOLD,
    SizeStage,
    Target,
)
from codevolve.problems.matmul_tensor.tensor import BEST_KNOWN_RANK

NAME = "matmul-tensor"

FEATURES = (
    FeatureSpec("solved_sizes", low=-0.5, high=8.5, bins=9),  # 0..8 sizes exact
    FeatureSpec("nonzero_share", low=0.0, high=1.0, bins=5),  # density of the largest answer
)


def _description(ring: Ring) -> str:
    ranks = ", ".join(
        f"<{s.n},{s.m},{s.p}> naive {s.naive_rank} best known {r}"
        for s, r in BEST_KNOWN_RANK.items()
    )
    return f"""\
Task: improve find_decomposition(n, m, p, rank, seed, time_budget_s), a search for a rank-`rank`
decomposition of the matrix multiplication tensor <n,m,p>. It returns [U, V, W] as lists of lists
of numbers, U (n*m x rank), V (m*p x rank), W (p*n x rank), and must return within time_budget_s
seconds (numpy is available; use the seed for every random choice).
The tensor T has shape (n*m, m*p, p*n) with T[i*m + j, j*p + k, k*n + i] = 1 (A is n x m, B is
m x p). The evaluator rounds every entry to the nearest element of the ring ({ring.value}) and
checks sum_r U[:, r] x V[:, r] x W[:, r] == T exactly; the rank is the number of terms whose three
factors are nonzero. Each such decomposition is an algorithm with that many multiplications:
C[i, k] = sum_r W[k*n + i, r] * (U[:, r] . vec A) * (V[:, r] . vec B).

Sizes and ranks asked: {ranks}.
Metric (higher is better), per size: exact with rank r scores 1 + (naive - r) / (naive - best
known), i.e. 2 at the best known rank; not exact scores 0.99 * ones / (ones + L1 residual),
where ones is the number of ones in T. The score is the mean over the sizes. Real-valued
solutions are easy to find; the difficulty is landing on integer points: progressive rounding
with refitting, penalties that pull entries to integers, sparsity, noise, restarts and
alternating least squares are all fair game."""


@functools.cache
def _initial_program() -> str:
    package = resources.files("codevolve.problems.matmul_tensor")
    return package.joinpath("initial_program.txt").read_text(encoding="utf-8")


def matmul_tensor_problem(ring: Ring = Ring.INTEGERS, *, budget_scale: float = 1.0) -> ProblemSpec:
    """Decompositions over ``ring`` (integers by default); cheap to build. ``budget_scale``
    multiplies every size's time budget (tests use small ones). No reference programs: the best
    known ranks are in the description and the score."""

    def scaled(targets: tuple[Target, ...]) -> tuple[Target, ...]:
        return tuple(replace(t, budget_s=t.budget_s * budget_scale) for t in targets)

    return ProblemSpec(
        name=NAME,
        description=_description(ring),
        initial_program=_initial_program(),
        stages=(
            SizeStage("tiny", scaled(TINY), first=True, threshold=TINY_THRESHOLD, ring=ring),
            SizeStage("mid", scaled(MID), ring=ring),
            SizeStage("large", scaled(LARGE), ring=ring),
        ),
        features=FEATURES,
        domain_mutations=_mutations,
    )


def _mutations() -> Sequence[Mutation]:
    from codevolve.problems.matmul_tensor.mutations import matmul_mutations

    return matmul_mutations()
