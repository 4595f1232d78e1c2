"""The configs the gemm-tiling mutations propose, and how they move from one config to the next.

A new config is launchable where a launchable choice exists (:func:`pick`). It comes from a step
along one field's value list (:func:`neighbours`), a coherent change of several fields
(:data:`COHERENT_MOVES`), the fit of a tile to M (:func:`fitted`), or a published config list
scaled to the shape (:func:`textbook_configs`).
"""

from __future__ import annotations

from collections.abc import Sequence

from numpy.random import Generator

from codevolve.problems.gemm_tiling.initial_program import GemmConfig
from codevolve.problems.gemm_tiling.rule_tests import Shape

FIELD_VALUES: dict[str, tuple[int, ...]] = {
    "block_m": (16, 32, 64, 128, 256),
    "block_n": (16, 32, 64, 128, 256),
    "block_k": (16, 32, 64, 128),
    "num_warps": (1, 2, 4, 8),
    "num_stages": (1, 2, 3, 4, 5),
    "group_m": (1, 4, 8),
}
MAX_REGISTERS = 255  # per thread
MAX_SHARED_BYTES = 232448  # per block: 227 KiB
# (block_m, block_n, block_k, num_stages, num_warps): the Triton matmul tutorial's autotune list
# (triton-lang/triton python/tutorials/03-matrix-multiplication.py) and PyTorch inductor's mm
# configs (torch/_inductor/template_heuristics), public data recorded in the research notes.
TEXTBOOK_LISTS: tuple[tuple[int, int, int, int, int], ...] = (
    (128, 256, 64, 3, 8), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2), (32, 64, 32, 5, 2),
    (128, 256, 128, 3, 8), (256, 128, 128, 3, 8), (256, 64, 128, 4, 4), (64, 256, 128, 4, 4),
    (128, 128, 128, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 32, 64, 4, 4),
    (32, 32, 16, 1, 2), (32, 32, 128, 2, 4), (32, 64, 32, 5, 8), (64, 32, 32, 5, 8),
    (64, 32, 128, 5, 4), (64, 64, 16, 2, 4), (64, 64, 32, 2, 4), (64, 64, 64, 3, 8),
    (64, 64, 128, 5, 4), (64, 128, 32, 3, 4), (64, 128, 32, 4, 8), (64, 128, 64, 3, 4),
    (64, 128, 128, 4, 4), (128, 64, 32, 3, 4), (128, 64, 32, 4, 8), (128, 128, 32, 2, 8),
    (128, 128, 32, 3, 4), (128, 128, 64, 3, 4), (128, 128, 64, 5, 8), (128, 128, 128, 4, 8),
)  # fmt: skip
# Coherent moves of the directed mutation: (field, steps along its value list) changed together,
# e.g. a taller tile with more warps, a narrower one with a deeper pipeline.
COHERENT_MOVES: tuple[tuple[tuple[str, int], ...], ...] = (
    (("block_m", 1), ("num_warps", 1)), (("block_m", -1), ("num_warps", -1)),
    (("block_n", 1), ("num_warps", 1)), (("block_n", -1), ("num_stages", 1)),
    (("block_k", 1), ("num_stages", -1)), (("block_k", -1), ("num_stages", 1)),
    (("block_m", 1), ("block_n", -1)), (("block_m", -1), ("block_n", 1)),
    (("num_stages", 1),), (("num_stages", -1),), (("num_warps", 1),), (("num_warps", -1),),
    (("group_m", 1),), (("group_m", -1),),
)  # fmt: skip


def launchable(config: GemmConfig) -> bool:
    """Registers, shared memory and warps within the launch limits of DESIGN section 8."""
    bm, bn, bk, warps, stages, _ = config
    registers = bm * bn / (32 * warps) + 40
    shared = stages * (bm + bn) * bk * 2  # bytes, bf16
    return registers <= MAX_REGISTERS and shared <= MAX_SHARED_BYTES and warps <= bm * bn / 256


def textbook_configs(shape: Shape) -> list[GemmConfig]:
    """Published config lists (the Triton matmul tutorial's autotune list and PyTorch inductor's
    mm list, as the research notes record them) scaled to the shape the way inductor does: each
    block no larger than its dimension padded to a power of two (at least 16), warps clamped so
    each owns a 16x16 tile. What an engineer who has read those sources would try first."""
    m, n, k = shape

    def padded(dim: int) -> int:
        return max(16, 1 << max(0, (dim - 1).bit_length()))

    configs = []
    for bm, bn, bk, stages, warps in TEXTBOOK_LISTS:
        bm, bn, bk = min(bm, padded(m)), min(bn, padded(n)), min(bk, padded(k))
        warps = max(1, min(warps, bm * bn // 256))
        group_m = 1 if m <= bm else 8
        config = GemmConfig(bm, bn, bk, warps, stages, group_m)
        if launchable(config) and config not in configs:
            configs.append(config)
    return configs


def fitted(config: GemmConfig, shape: Shape) -> GemmConfig | None:
    """The textbook fit of a tile to M: block_m no taller than M padded to a power of two (at
    least 16), and no swizzle groups (group_m 1) when one tile row covers all of M."""
    m = shape[0]
    padded = max(16, min(256, 1 << max(0, (m - 1).bit_length())))
    block_m = min(config.block_m, padded)
    group_m = 1 if m <= block_m else config.group_m
    fit = config._replace(block_m=block_m, group_m=group_m)
    return fit if fit != config and launchable(fit) else None


def neighbours(config: GemmConfig) -> list[GemmConfig]:
    """Configs one step away along one field."""
    moves = [((name, step),) for name in GemmConfig._fields for step in (-1, 1)]
    return [c for c in (move(config, m) for m in moves) if c is not None]


def move(config: GemmConfig, steps: Sequence[tuple[str, int]]) -> GemmConfig | None:
    """The config with each named field stepped along its value list; None past an end."""
    changes = {}
    for name, step in steps:
        values, current = FIELD_VALUES[name], getattr(config, name)
        position = min(range(len(values)), key=lambda i: abs(values[i] - current)) + step
        if not 0 <= position < len(values):
            return None
        changes[name] = values[position]
    moved = config._replace(**changes)
    return None if moved == config else moved


def pick(options: Sequence[GemmConfig], rng: Generator) -> GemmConfig | None:
    """A random option, from the launchable ones when there are any."""
    pool = [o for o in options if launchable(o)] or list(options)
    return pool[int(rng.integers(len(pool)))] if pool else None
