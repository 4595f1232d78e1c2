"""The shapes gemm-kernel-gpu selects on, and the shapes that only confirm a would-be best.

A full evaluation once timed 991 shapes: the 187 train and 408 validation shapes of gemm-tiling's
split (the score) and, measured alongside and only reported, its 396 test shapes (209 of the
three held-out families, 187 seen projections at grid M values train lacks). Each shape is
checked on three input distributions and timed in a dozen batches of about 20 ms, against cuBLAS
timed the same way: about half a second of the device per shape, some eight minutes per program,
where a search wants a program every two seconds.

Selection needs far fewer. The score has to rank a child against its parent, and every dispatch
rule a child can write has to meet shapes it covers. So the GPU stage scores :data:`PER_M`
shapes at each of the 23 token counts of train and validation (the 11 grid M values of train,
the 12 between them of validation): 69 shapes, every regime and every M bound a rule can carve
out met, and the seen projections taken in turn (the least used first), so that each is timed
at two or three token counts and no (N, K) pair dominates. The probe's six shapes are among
them. Which shapes they are is fixed, so that the launch store's timings of one child stand for
the next. (Each is timed in 7 batches now, not 12: stages.SAMPLES.)

The test split is never selected on: the GPU stage times it only on the first sample of a
would-be best's re-measure (``Task.remeasure`` 1; controller/confirmation.py), whose figures
become that program's held-out report. An evaluation during the search times the 69 shapes
(fewer where the store holds their launches' timings); a re-measure sample the 69, and the first
one the 396 test shapes too.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict

from codevolve.problems.gemm_tiling.shapes import GemmShape, Split, probe_shapes, tiling_split

PER_M = 3  # shapes timed per token count during selection


@functools.cache
def selection_shapes(per_m: int = PER_M) -> tuple[GemmShape, ...]:
    """The shapes the GPU stage scores during the search (sorted by M, N, K)."""
    return select(tiling_split(), per_m)


def select(split: Split, per_m: int) -> tuple[GemmShape, ...]:
    """``per_m`` shapes of ``split``'s train and validation at each of their token counts, the
    projections least used so far first (then in catalogue order), plus the probe's shapes."""
    order = {pair: index for index, pair in enumerate(split.seen_pairs)}
    by_m: dict[int, list[GemmShape]] = defaultdict(list)
    for shape in (*split.train, *split.validation):
        by_m[shape.m].append(shape)
    used: Counter[tuple[int, int]] = Counter()
    chosen: set[GemmShape] = set(probe_shapes(split.train))
    for shape in chosen:
        used[(shape.n, shape.k)] += 1
    for m in sorted(by_m):
        have = [s for s in by_m[m] if s in chosen]
        pool = sorted(
            (s for s in by_m[m] if s not in chosen),
            key=lambda s: (used[(s.n, s.k)], order.get((s.n, s.k), len(order))),
        )
        for shape in pool[: max(0, per_m - len(have))]:
            chosen.add(shape)
            used[(shape.n, shape.k)] += 1
    return tuple(sorted(chosen))
