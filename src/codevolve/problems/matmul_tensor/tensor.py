"""The matrix multiplication tensor <n,m,p> in the convention AlphaTensor and AlphaEvolve publish.

A is n x m, B is m x p, C = A B is n x p. T has shape (n*m, m*p, p*n) with
``T[i*m + j, j*p + k, k*n + i] = 1``: the first factor indexes A row-major, the second B row-major,
the third C^T row-major. A rank-R decomposition is U (nm x R), V (mp x R), W (pn x R) with
``sum_r U[:, r] (x) V[:, r] (x) W[:, r] = T``, and then

    C[i, k] = sum_r W[k*n + i, r] * (U[:, r] . vec A) * (V[:, r] . vec B)

uses R scalar multiplications of a linear form of A by a linear form of B.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True, order=True)
class Size:
    """A matrix multiplication size <n, m, p>: (n x m) times (m x p)."""

    n: int
    m: int
    p: int

    @property
    def key(self) -> str:
        return f"{self.n}x{self.m}x{self.p}"

    @property
    def naive_rank(self) -> int:
        return self.n * self.m * self.p

    @property
    def shape(self) -> tuple[int, int, int]:
        """The tensor's shape (n*m, m*p, p*n)."""
        return (self.n * self.m, self.m * self.p, self.p * self.n)

    @classmethod
    def parse(cls, text: str) -> Size:
        """``"2x3x4"`` or ``"2,3,4"`` -> Size(2, 3, 4)."""
        parts = text.replace(",", "x").split("x")
        if len(parts) != 3 or not all(part.strip().isdigit() for part in parts):
            raise ValueError(f"not a size n x m x p: {text!r}")
        n, m, p = (int(part) for part in parts)
        if min(n, m, p) < 1:
            raise ValueError(f"sizes are positive: {text!r}")
        return cls(n, m, p)


# Best ranks published for decompositions with integer coefficients (AlphaTensor 2022, Table of
# Fawzi et al., and earlier literature); <4,4,4> is 48 over the complex numbers (AlphaEvolve 2025).
BEST_KNOWN_RANK: dict[Size, int] = {
    Size(2, 2, 2): 7,
    Size(2, 2, 3): 11,
    Size(2, 2, 4): 14,
    Size(2, 3, 3): 15,
    Size(2, 3, 4): 20,
    Size(3, 3, 3): 23,
    Size(3, 3, 4): 29,
    Size(4, 4, 4): 49,
}


def matmul_tensor(size: Size) -> npt.NDArray[np.int64]:
    """T for <n,m,p> as a 0/1 integer array of shape (n*m, m*p, p*n)."""
    n, m, p = size.n, size.m, size.p
    tensor = np.zeros(size.shape, dtype=np.int64)
    for i in range(n):
        for j in range(m):
            for k in range(p):
                tensor[i * m + j, j * p + k, k * n + i] = 1
    return tensor
