"""The 88 GEMM shapes: Llama-3.1 projections times eleven token counts, and their split.

Each projection is ``y = x @ W.T`` with W of shape [N, K] (nn.Linear layout). The (N, K) pairs are
Llama-3.1-8B on one GPU and Llama-3.1-70B sharded over 8 GPUs by tensor parallelism (vLLM's
sharding: qkv and gate_up split N, o and down split K); see research/gemm_gpu.md section 1.
M is the number of tokens in the batch: 1 and 16 are decode, 32..512 mid-size, 1024..8192 prefill.

The 88 shapes are split at random, with the fixed seed :data:`SPLIT_SEED`, into 44 train shapes
(scored, shown to proposers) and 44 test shapes (reported, never selected on). The split is
stratified by M: for every M value, 4 of the 8 projections are drawn for train. An unstratified
draw can leave an M value out of train entirely (seed 20240723 left out M=1024), and then the
per-M lookup baseline is undefined there and the test split measures extrapolation to an unseen M
rather than generalisation across projections.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from codevolve.problems.gemm_tiling.errors import GemmTilingError


@dataclass(frozen=True, slots=True)
class Projection:
    """One weight matrix W [N, K] of a model, as one GPU holds it."""

    name: str  # e.g. "8B.qkv", "70B_tp8.down"
    n: int  # output features
    k: int  # input features


PROJECTIONS = (
    Projection("8B.qkv", 6144, 4096),  # (32 + 2*8) heads * 128
    Projection("8B.o", 4096, 4096),
    Projection("8B.gate_up", 28672, 4096),  # 2 * 14336
    Projection("8B.down", 4096, 14336),
    Projection("70B_tp8.qkv", 1280, 8192),  # (64 + 2*8) heads * 128 / 8
    Projection("70B_tp8.o", 8192, 1024),  # K = 64 * 128 / 8
    Projection("70B_tp8.gate_up", 7168, 8192),  # 2 * 28672 / 8
    Projection("70B_tp8.down", 8192, 3584),  # K = 28672 / 8
)
M_VALUES = (1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)  # tokens per batch
# Token counts missing from M_VALUES, never in the 88 shapes: the octaves that the grid skips
# between 1 and 16 (2, 4, 8) and the points between its neighbours from 16 up (3 * 2**k). The
# validation shapes of stages that select on more than the train split (gemm-tiling-gpu).
VALIDATION_M_VALUES = (2, 4, 8, 24, 48, 96, 192, 384, 768, 1536, 3072, 6144)

DECODE_MAX_M = 16  # M <= 16: decode, bound by reading the weights
PREFILL_MIN_M = 1024  # M >= 1024: prefill, bound by tensor-core throughput

# Seed of the train/test split: the Llama 3.1 release date. Changing it changes every figure.
SPLIT_SEED = 20240723
TRAIN_SIZE = 44


@dataclass(frozen=True, slots=True, order=True)
class GemmShape:
    """One problem instance: x [M, K] times W.T, W [N, K], bf16."""

    m: int
    n: int
    k: int
    projection: str = "unseen"  # the projection's name, or "unseen" for shapes outside the 88

    @property
    def key(self) -> str:
        """The case key shown to proposers, e.g. ``"M=16 N=6144 K=4096"``."""
        return f"M={self.m} N={self.n} K={self.k}"

    @property
    def model(self) -> str:
        """The model part of the projection's name: "8B", "70B_tp8" or "unseen"."""
        return self.projection.split(".")[0]

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


@functools.cache
def all_shapes() -> tuple[GemmShape, ...]:
    """The 88 shapes, projection-major, M ascending."""
    return tuple(GemmShape(m, p.n, p.k, p.name) for p in PROJECTIONS for m in M_VALUES)


@functools.cache
def _split() -> tuple[tuple[GemmShape, ...], tuple[GemmShape, ...]]:
    rng = np.random.default_rng(SPLIT_SEED)
    per_m = TRAIN_SIZE // len(M_VALUES)  # 4 of the 8 projections of each M
    train: list[GemmShape] = []
    test: list[GemmShape] = []
    for m in M_VALUES:
        group = sorted(s for s in all_shapes() if s.m == m)
        order = rng.permutation(len(group))
        train += [group[i] for i in order[:per_m]]
        test += [group[i] for i in order[per_m:]]
    return tuple(sorted(train)), tuple(sorted(test))


def train_shapes() -> tuple[GemmShape, ...]:
    """The 44 shapes programs are scored and selected on (sorted by M, N, K)."""
    return _split()[0]


def heldout_shapes() -> tuple[GemmShape, ...]:
    """The 44 held-out shapes: reported, never selected on (sorted by M, N, K)."""
    return _split()[1]


@functools.cache
def validation_shapes() -> tuple[GemmShape, ...]:
    """The 8 projections at the token counts between the grid's (96 shapes, sorted by M, N, K).

    None of them is one of the 88 shapes, so selecting on them leaks nothing of the held-out split.
    They exist because 44 train shapes leave parts of the shape space unreached: a rule that only
    held-out shapes take (``if M <= 64:`` after rules that catch every train shape with M <= 64)
    would otherwise never be judged. A validation shape sits between two grid values of M for
    every projection, so each range of M (or of M * N) that a rule can carve out around a
    held-out shape often holds one.
    """
    return tuple(
        sorted(GemmShape(m, p.n, p.k, p.name) for p in PROJECTIONS for m in VALIDATION_M_VALUES)
    )


@functools.cache
def probe_shapes() -> tuple[GemmShape, ...]:
    """Six train shapes, one per (regime, model): a cheap first look at a candidate.

    For each pair the train shape with the median M of that pair is taken (the larger of the two
    middle ones), so the probe sits inside each regime rather than at its edge.
    """
    probes = []
    for regime in ("decode", "mid", "prefill"):
        for model in ("8B", "70B_tp8"):
            group = [s for s in train_shapes() if s.regime == regime and s.model == model]
            if not group:
                raise GemmTilingError(f"the split leaves no {regime} {model} shape in train")
            probes.append(sorted(group)[len(group) // 2])
    return tuple(probes)


@functools.cache
def shape_index() -> dict[GemmShape, int]:
    """Row of each of the 88 shapes in :func:`all_shapes` (and in the cost model's table)."""
    return {shape: i for i, shape in enumerate(all_shapes())}
