"""gemm-tiling-gpu's split: whole projections held out among the eight measured ones.

The GPU problem can score only shapes whose times are stored: the per-shape oracle and the
published baselines (data/oracle_h200.json) were measured on an H200 for the eight Llama-3.1
projections of :data:`~codevolve.problems.gemm_tiling.catalogue.MEASURED` (8B on one GPU, 70B
at tensor parallel 8), at the eleven grid M values and the twelve validation M values. The
catalogue's other projections were never measured there and no GPU is at hand to measure them,
so this problem's catalogue is those eight.

Held out: one projection of each of the two models, drawn with the fixed seed
:data:`~codevolve.problems.gemm_tiling.shapes.SPLIT_SEED`, at every grid M. Their (N, K) pairs are
in neither train nor validation (their validation rows are dropped from selection). The other
six projections are train at every grid M and validation at the validation M values. The probe
models (8B, 70B_tp8) both keep three train projections.
"""

from __future__ import annotations

import functools

import numpy as np

from codevolve.problems.gemm_tiling.catalogue import MEASURED
from codevolve.problems.gemm_tiling.shapes import SPLIT_SEED, Split, split_projections

PER_MODEL = 4  # MEASURED holds 8B's four projections, then 70B_tp8's


@functools.cache
def gpu_split() -> Split:
    """Train and validation on six measured projections; the other two held out (unseen)."""
    rng = np.random.default_rng(SPLIT_SEED)
    models = [MEASURED[i : i + PER_MODEL] for i in range(0, len(MEASURED), PER_MODEL)]
    held_out = [model[int(rng.integers(PER_MODEL))] for model in models]
    seen = [p for p in MEASURED if p not in held_out]
    return split_projections(seen, held_out, seen_test_share=0.0, seed=SPLIT_SEED)
