"""The GEMM shapes: the catalogue's projections times eleven token counts, and their split.

M is the number of tokens in the batch: 1 and 16 are decode, 32..512 mid-size, 1024..8192
prefill. The projections (catalogue.py) are those of seven model families.

The split measures generalisation to projections never seen. Three whole families are held out
(:data:`HELD_OUT_FAMILIES`: Gemma-2, Phi-3 and Mixtral): their projections at every M are the
**unseen** test split, and no (N, K) pair of theirs is in train or validation. They were chosen,
before any figure was measured, as the families whose N and K lie inside the ranges the other
four cover (so the test asks for interpolation across projections, not extrapolation in size) and
which bring what the others lack: head dim 256 (Gemma-2-9B), a 17920 intermediate (Phi-3),
experts sharded by tensor parallelism (Mixtral). The other four families (Llama, Qwen, Mistral,
DeepSeek: dense, MoE and latent attention, one GPU and tensor-parallel shards) are **seen**:
their shapes at the eleven grid M values are split, with the fixed seed :data:`SPLIT_SEED` and
stratified by M, into train (for every M, half of the seen projections, rounded down) and the
**seen** test split (the other half): projections whose (N, K) train has at other M. The
validation shapes are the seen projections at the token counts the grid lacks. Selection uses
train and validation; both test splits are reported, never selected on.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codevolve.problems.gemm_tiling.catalogue import CATALOGUE, Projection
from codevolve.problems.gemm_tiling.errors import GemmTilingError

PROJECTIONS = CATALOGUE  # every projection: seen and held out
M_VALUES = (1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)  # tokens per batch
# Token counts missing from M_VALUES, never in the grid shapes: the octaves that the grid skips
# between 1 and 16 (2, 4, 8) and the points between its neighbours from 16 up (3 * 2**k). The
# validation shapes: selected on, with train.
VALIDATION_M_VALUES = (2, 4, 8, 24, 48, 96, 192, 384, 768, 1536, 3072, 6144)

DECODE_MAX_M = 16  # M <= 16: decode, bound by reading the weights
PREFILL_MIN_M = 1024  # M >= 1024: prefill, bound by tensor-core throughput

HELD_OUT_FAMILIES = frozenset({"gemma", "phi", "mixtral"})
# Seed of the seen projections' split by M: the Llama 3.1 release date. Changing it changes
# every figure.
SPLIT_SEED = 20240723
PROBE_MODELS = ("8B", "70B_tp8")  # the probe's models: seen, and measured on the GPU


@dataclass(frozen=True, slots=True, order=True)
class GemmShape:
    """One problem instance: x [M, K] times W.T, W [N, K], bf16."""

    m: int
    n: int
    k: int
    projection: str = "unseen"  # the projection's name, or "unseen" for shapes outside the grid

    @property
    def key(self) -> str:
        """The case key shown to proposers, e.g. ``"M=16 N=6144 K=4096"``."""
        return f"M={self.m} N={self.n} K={self.k}"

    @property
    def model(self) -> str:
        """The model part of the projection's name, e.g. "8B", "70B_tp8" or "unseen"."""
        return self.projection.rsplit(".", 1)[0]

    @property
    def regime(self) -> str:
        if self.m <= DECODE_MAX_M:
            return "decode"
        if self.m >= PREFILL_MIN_M:
            return "prefill"
        return "mid"

    @property
    def args(self) -> list[int]:
        """The arguments of ``choose_config(M, N, K)``."""
        return [self.m, self.n, self.k]

    def __str__(self) -> str:
        return f"{self.projection} M={self.m}"


@dataclass(frozen=True, slots=True)
class Split:
    """Shapes of a set of projections by role; each part sorted by (M, N, K)."""

    train: tuple[GemmShape, ...]  # scored and selected on, shown to proposers
    validation: tuple[GemmShape, ...]  # seen projections at M the grid lacks; selected on
    seen_test: tuple[GemmShape, ...]  # seen projections at grid M that train lacks; reported
    unseen_test: tuple[GemmShape, ...]  # held-out projections at every grid M; reported
    seen_pairs: tuple[tuple[int, int], ...]  # the seen projections' (N, K), in catalogue order

    @property
    def test(self) -> tuple[GemmShape, ...]:
        """Both test splits: reported, never selected on."""
        return tuple(sorted(self.seen_test + self.unseen_test))

    @property
    def seen_grid(self) -> tuple[GemmShape, ...]:
        """The seen projections at every grid M: train and the seen test split."""
        return tuple(sorted(self.train + self.seen_test))


def grid_of(projections: Sequence[Projection], ms: Sequence[int]) -> tuple[GemmShape, ...]:
    """Every projection at every M, sorted by (M, N, K)."""
    return tuple(sorted(GemmShape(m, p.n, p.k, p.name) for p in projections for m in ms))


def split_projections(
    seen: Sequence[Projection],
    held_out: Sequence[Projection],
    *,
    seen_test_share: float,
    seed: int,
) -> Split:
    """Held-out projections to the unseen test split at every M; for every M, a seeded
    ``seen_test_share`` of the seen projections (rounded down) to the seen test split, the rest
    to train. Validation: the seen projections at :data:`VALIDATION_M_VALUES`."""
    pairs = {(p.n, p.k) for p in seen}
    shared = [p.name for p in held_out if (p.n, p.k) in pairs]
    if shared:
        raise GemmTilingError(f"held-out projections {shared} have a seen projection's (N, K)")
    rng = np.random.default_rng(seed)
    per_m = int(len(seen) * seen_test_share)
    train: list[GemmShape] = []
    seen_test: list[GemmShape] = []
    for m in M_VALUES:
        group = grid_of(seen, (m,))
        order = rng.permutation(len(group))
        seen_test += [group[i] for i in order[:per_m]]
        train += [group[i] for i in order[per_m:]]
    return Split(
        train=tuple(sorted(train)),
        validation=grid_of(seen, VALIDATION_M_VALUES),
        seen_test=tuple(sorted(seen_test)),
        unseen_test=grid_of(held_out, M_VALUES),
        seen_pairs=tuple((p.n, p.k) for p in seen),
    )


def seen_projections() -> tuple[Projection, ...]:
    """The projections of the families not held out (catalogue order)."""
    return tuple(p for p in CATALOGUE if p.family not in HELD_OUT_FAMILIES)


def held_out_projections() -> tuple[Projection, ...]:
    """The projections of :data:`HELD_OUT_FAMILIES` (catalogue order)."""
    return tuple(p for p in CATALOGUE if p.family in HELD_OUT_FAMILIES)


@functools.cache
def tiling_split() -> Split:
    """gemm-tiling's split: half of the seen projections of each M held out as the seen test."""
    return split_projections(
        seen_projections(), held_out_projections(), seen_test_share=0.5, seed=SPLIT_SEED
    )


@functools.cache
def all_shapes() -> tuple[GemmShape, ...]:
    """Every projection at every grid M, projection-major (catalogue order), M ascending."""
    return tuple(GemmShape(m, p.n, p.k, p.name) for p in CATALOGUE for m in M_VALUES)


def train_shapes() -> tuple[GemmShape, ...]:
    """The shapes programs are scored and selected on (sorted by M, N, K)."""
    return tiling_split().train


def heldout_shapes() -> tuple[GemmShape, ...]:
    """Both test splits, seen and unseen projections: reported, never selected on."""
    return tiling_split().test


def unseen_shapes() -> tuple[GemmShape, ...]:
    """The held-out families' shapes: no (N, K) of theirs is in train or validation."""
    return tiling_split().unseen_test


def seen_test_shapes() -> tuple[GemmShape, ...]:
    """Seen projections at grid M values train lacks for them."""
    return tiling_split().seen_test


def validation_shapes() -> tuple[GemmShape, ...]:
    """The seen projections at the token counts between the grid's (sorted by M, N, K).

    None of them is a grid shape, and none has a held-out family's (N, K), so selecting on them
    leaks nothing of either test split. They exist because the train shapes leave parts of the
    shape space unreached: a rule that only held-out shapes take (``if M <= 64:`` after rules that
    catch every train shape with M <= 64) would otherwise never be judged. A validation shape
    sits between two grid values of M for every seen projection, so each range of M (or of
    M * N) that a rule can carve out around a held-out shape often holds one.
    """
    return tiling_split().validation


def probe_shapes(train: Sequence[GemmShape] | None = None) -> tuple[GemmShape, ...]:
    """Six train shapes (of ``train``, gemm-tiling's by default), one per (regime, probe model):
    a cheap first look at a candidate.

    For each pair the train shape with the median M of that pair is taken (the larger of the two
    middle ones), so the probe sits inside each regime rather than at its edge.
    """
    train = train_shapes() if train is None else train
    probes = []
    for regime in ("decode", "mid", "prefill"):
        for model in PROBE_MODELS:
            group = [s for s in train if s.regime == regime and s.model == model]
            if not group:
                raise GemmTilingError(f"the split leaves no {regime} {model} shape in train")
            probes.append(sorted(group)[len(group) // 2])
    return tuple(probes)


@functools.cache
def shape_index() -> dict[GemmShape, int]:
    """Row of each grid shape in :func:`all_shapes` (and in the cost model's table)."""
    return {shape: i for i, shape in enumerate(all_shapes())}
