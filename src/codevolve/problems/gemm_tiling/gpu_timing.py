"""A GEMM as the GPU judges time it: the record both GPU problems' judges return per shape, and
the bf16 tolerance they check outputs with.

gemm-tiling-gpu's bench (the trusted Triton GEMM with each config) and gemm-kernel-gpu's judge
(a candidate's own kernel module) both time against cuBLAS and reply with these rows; both
problems build on gemm-tiling's shapes, so the shared record lives here. No torch.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

RTOL = 1.6e-2  # torch's default bf16 rtol (torch/testing/_comparison.py)
ATOL_OF_RMS = 2e-2  # absolute floor, as a fraction of the reference's RMS
Shape = tuple[int, int, int]  # M, N, K


@dataclass(frozen=True, slots=True)
class Timing:
    """One (shape, config) as measured. Times in microseconds."""

    status: str  # ok | compile_error | incorrect
    t_us: float = math.inf  # candidate median
    p20_us: float = math.inf
    p80_us: float = math.inf
    cublas_us: float = math.inf  # cuBLAS median, timed alternately with the candidate
    samples: int = 0
    detail: str = ""


def timing_dict(timing: Timing) -> dict[str, object]:
    return asdict(timing)
