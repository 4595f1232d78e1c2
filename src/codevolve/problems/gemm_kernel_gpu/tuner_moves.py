"""A tuner's moves: the launch families a kernel engineer sweeps, and rules on shape features.

Both read the parent's measured shapes (its cases) and the device's SM count, and reason with
shape_features.py; neither copies a launch a run has found (docs/results-gpu-kernel.md).

- ``launch_family``: for one of the parent's shapes, a rule with a launch of a family that the
  shape's features call for, its test written on the same features so that it covers the
  shapes alike (the held-out families' among them):

  - ``deep``: the regime's usual tile with the deepest pipeline that fits shared memory (cuBLAS
    fills about 192 KiB with stages where Triton's defaults stop at 3-4);
  - ``wide``: the tile width (a power of two, or two dots 128 + 16/32/64 wide) whose waves waste
    least on this shape: a partial last wave idles SMs;
  - ``split_k``: where the tiles are fewer than the SMs, K split so the pieces fill one wave,
    each keeping at least :data:`MIN_STEPS` K steps;
  - ``persistent``: where the tiles make :data:`~.shape_features.MANY_WAVES` waves or more, one
    program per SM walking the tiles (no launch of a block per tile, pipelines across tiles);
  - ``stream_k``: where the last of a few waves is less than half full, its K steps shared
    out among the SMs.

- ``feature_rule``: a rule's test rewritten as its M bounds and one feature of its launch at
  the shape: tiles per wave (``tiles * split < 66``), K steps per tile (``K // 128 >= 32``) or
  arithmetic intensity (``M * N * K >= 64 * (M * K + N * K + M * N)``). Any (N, K) pair in the
  old test goes: rules keyed on pairs do not carry to new model families.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from codevolve.core.diff import Hunk
from codevolve.core.prompt import Prompt
from codevolve.problems.gemm_kernel_gpu.dispatch_rules import fits, line_hunk, rules_of
from codevolve.problems.gemm_kernel_gpu.kernel_source import VARIANTS, add_rule
from codevolve.problems.gemm_kernel_gpu.shape_features import (
    MANY_WAVES,
    Launch,
    Shape,
    bucket_of,
    case_shapes,
    k_per_tile,
    max_stages,
    regime_of,
    regime_test,
    sms_of,
    tiles,
    tiles_expr,
    waves,
)
from codevolve.problems.gemm_tiling.shapes import train_shapes

MIN_STEPS = 4  # K steps a split piece keeps at least (fewer: the pipeline never fills)
NEAR_BEST = 0.97  # wave efficiency within this of the best counts as a tie (larger tile wins)
# The usual tiles per regime (shape_features.REGIMES order), at a depth max_stages replaces.
DEEP_STARTS: tuple[tuple[Launch, ...], ...] = (
    (Launch("plain", (16, 64, 128, 4, 4, 1)), Launch("split_k", (16, 64, 128, 4, 4, 4))),
    (Launch("tma", (64, 128, 64, 4, 4, 8)), Launch("tma", (64, 64, 64, 4, 4, 8))),
    (Launch("tma", (128, 128, 64, 4, 4, 8)), Launch("tma_persistent", (128, 128, 64, 4, 4, 8, 1))),
    (Launch("tma_persistent", (128, 128, 64, 4, 4, 8, 1)), Launch("tma", (128, 256, 64, 8, 3, 8))),
)
# Variants whose rules serve few tiles or memory-bound shapes (feature tests point below a
# threshold), and those that serve many tiles (above it).
FEW_TILES = frozenset({"split_k", "split_k_fused", "gemv", "stream_k", "tail_split"})
MANY_TILES = frozenset({"persistent", "tma_persistent", "tma_persistent_wide"})
TILE_THRESHOLDS = (1 / 4, 1 / 2, 1, 2, 4, 8)  # in waves
STEP_THRESHOLDS = (4, 8, 16, 32, 64, 128)  # K steps per tile
INTENSITY_THRESHOLDS = (8, 16, 32, 64, 128, 256, 512)  # flops per byte


@dataclass(frozen=True, slots=True)
class Proposed:
    """A launch of a family for a shape, and the test of the rule that launches it."""

    family: str
    launch: Launch
    test: str


def _deep(launch: Launch) -> Launch:
    return launch.with_param("stages", max_stages(launch))


def family_launches(shape: Shape, sms: int) -> list[Proposed]:
    """The families the shape's features call for, each with its launch and rule test."""
    m = shape[0]
    regime = regime_of(m)
    near = bucket_of(shape, sms).test(sms)
    found = [Proposed("deep", _deep(start), near) for start in DEEP_STARTS[regime]]
    if regime > 0:
        found.append(Proposed("wide", _widest_fill(shape, sms, regime), near))
    split = _split(shape, sms)
    if split is not None:
        count = tiles_expr(split.block_m, split.width)
        at_least = split.split * split.block_k * MIN_STEPS
        test = f"{regime_test(regime)} and {count} * {split.split} <= {sms} and K >= {at_least}"
        found += [Proposed("split_k", split, test)]
        fused = Launch("split_k_fused", split.args)
        found += [Proposed("split_k", fused, test)]
    for start in (
        Launch("tma_persistent", (128, 256, 64, 8, 3, 8, 1)),
        Launch("tma_persistent", (128, 128, 64, 4, 4, 8, 1)),
    ):
        if m > 16 and tiles(start, shape) >= MANY_WAVES * sms:
            count = tiles_expr(start.block_m, start.width)
            test = f"{regime_test(regime)} and {count} >= {MANY_WAVES * sms}"
            found.append(Proposed("persistent", _deep(start), test))
    stream = Launch("persistent_stream_k", (128, 128, 64, 8, 4, 8, 1))
    count_now = tiles(stream, shape)
    last = count_now % sms  # tiles in the last wave
    if m > 16 and sms <= count_now < MANY_WAVES * sms and last > 0 and last * 2 < sms:
        count = tiles_expr(stream.block_m, stream.width)
        test = f"{regime_test(regime)} and {count} >= {sms} and {count} < {MANY_WAVES * sms}"
        found.append(Proposed("stream_k", _deep(stream), f"{test} and {count} % {sms} * 2 < {sms}"))
    return found


def _widest_fill(shape: Shape, sms: int, regime: int) -> Launch:
    """The tile whose waves waste least work on the shape (padding and a partial last wave),
    the largest of those within :data:`NEAR_BEST` of the best, at its deepest pipeline."""
    m, n, _ = shape
    rows = (64,) if regime == 1 else (64, 128) if regime == 2 else (128,)
    candidates = [Launch("tma", (r, w, 64, 4, 4, 8)) for r in rows for w in (64, 128, 256)]
    candidates += [
        Launch("tma_wide", (r, base, 64, 4, 4, 8, extra))
        for r in rows
        for base in (64, 128)
        for extra in VARIANTS["tma_wide"].values[-1]
    ]

    def efficiency(launch: Launch) -> float:
        return m * n / (waves(launch, shape, sms) * sms * launch.block_m * launch.width)

    best = max(efficiency(c) for c in candidates)
    near = [c for c in candidates if efficiency(c) >= NEAR_BEST * best]
    chosen = max(near, key=lambda c: (c.block_m * c.width, efficiency(c), str(c)))
    if chosen.block_m * chosen.width > 128 * 128:
        chosen = chosen.with_param("warps", 8)
    return _deep(chosen)


def _split(shape: Shape, sms: int) -> Launch | None:
    """A split-K launch whose pieces fill one wave as fully as any (fewest splits of those),
    each keeping :data:`MIN_STEPS` K steps; None when the tiles alone fill the SMs."""
    rows = 16 if shape[0] <= 16 else 64
    best: tuple[float, int, Launch] | None = None
    for width in (32, 64, 128):
        for split in VARIANTS["split_k"].values[-1]:
            launch = Launch("split_k", (rows, width, 128, 4, 4, split))
            pieces = tiles(launch, shape) * split
            if tiles(launch, shape) >= sms or pieces > sms:
                continue
            if k_per_tile(launch, shape) < MIN_STEPS * launch.block_k:
                continue
            key = (pieces / sms, -split, launch)
            if best is None or key[:2] > best[:2]:
                best = key
    return None if best is None else _deep(best[2])


def launch_family(
    source: str, tree: ast.Module, prompt: Prompt, rng: np.random.Generator
) -> list[Hunk] | None:
    del tree
    sms = sms_of(prompt.parent)
    shapes = case_shapes(prompt.parent) or [(s.m, s.n, s.k) for s in train_shapes()]
    shape = shapes[int(rng.integers(len(shapes)))]
    proposed = [p for p in family_launches(shape, sms) if fits(source, p.launch.variant)]
    if not proposed:
        return None
    chosen = proposed[int(rng.integers(len(proposed)))]
    return add_rule(source, chosen.test, VARIANTS[chosen.launch.variant], chosen.launch.args)


def feature_rule(
    source: str, tree: ast.Module, prompt: Prompt, rng: np.random.Generator
) -> list[Hunk] | None:
    rules = rules_of(tree)
    if not rules:
        return None
    rule = rules[int(rng.integers(len(rules)))]
    launch = Launch(rule.variant.name, rule.args)
    bounds = _m_bounds(rule.test)
    sms = sms_of(prompt.parent)
    shapes = [s for s in case_shapes(prompt.parent) if all(_holds(b, s[0]) for b in bounds)]
    kind = ("tiles", "steps", "intensity")[int(rng.integers(3))]
    feature = _feature_test(kind, launch, shapes, sms, rng)
    test = " and ".join([*(ast.unparse(b) for b in bounds), feature])
    line = source.split("\n")[rule.first]
    indent = line[: len(line) - len(line.lstrip())]
    return line_hunk(source, rule.first, rule.call, [f"{indent}if {test}:"])


def _m_bounds(test: ast.expr) -> list[ast.Compare]:
    """The comparisons of M with an int in a rule's test (the rest is rewritten)."""
    return [
        node
        for node in ast.walk(test)
        if isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.left, ast.Name)
        and node.left.id == "M"
        and isinstance(node.comparators[0], ast.Constant)
        and type(node.comparators[0].value) is int
        and not isinstance(node.ops[0], ast.Eq | ast.NotEq)
    ]


def _holds(bound: ast.Compare, m: int) -> bool:
    value = bound.comparators[0]
    assert isinstance(value, ast.Constant) and type(value.value) is int
    limit: int = value.value
    op = bound.ops[0]
    if isinstance(op, ast.Lt):
        return m < limit
    if isinstance(op, ast.LtE):
        return m <= limit
    if isinstance(op, ast.Gt):
        return m > limit
    return m >= limit


def _feature_test(
    kind: str, launch: Launch, shapes: list[Shape], sms: int, rng: np.random.Generator
) -> str:
    """One feature of the launch compared with a threshold that splits the shapes in range
    where one does (any of the thresholds otherwise)."""
    if kind == "tiles":
        left = tiles_expr(launch.block_m, launch.width)
        left += f" * {launch.split}" if launch.split > 1 else ""
        limits = [max(1, round(f * sms)) for f in TILE_THRESHOLDS]
        values = [tiles(launch, s) * launch.split for s in shapes]
        right = "{}"
    elif kind == "steps":
        left = f"K // {launch.block_k * launch.split}"
        limits = list(STEP_THRESHOLDS)
        values = [s[2] // (launch.block_k * launch.split) for s in shapes]
        right = "{}"
    else:
        left = "M * N * K"
        limits = list(INTENSITY_THRESHOLDS)
        values = [round(m * n * k / (m * k + n * k + m * n)) for m, n, k in shapes]
        right = "{} * (M * K + N * K + M * N)"
    splitting = [t for t in limits if any(v < t for v in values) and any(v >= t for v in values)]
    pool = splitting or limits
    limit = pool[int(rng.integers(len(pool)))]
    if launch.variant in FEW_TILES:
        below = True
    elif launch.variant in MANY_TILES:
        below = False
    else:
        below = bool(rng.integers(2))
    return f"{left} {'<' if below else '>='} {right.format(limit)}"
