"""Mutations a kernel engineer would try, as SEARCH/REPLACE edits of a kernel program.

A program dispatches in ``matmul`` (kernel_source.py): rules ``if <test>: return launch_<variant>(
x, w, y, workspace, num_sms, <ints>)`` before the default tiled launch, whose tile config comes
from ``choose_config``. The kernel moves:

- ``add_variant``: a rule launching another kernel family for a regime (decode M <= 16, mid,
  prefill M >= 1024), sometimes for one shape's feature bucket (shape_features.py) only: two-pass
  split-K, persistent tiles, TMA descriptors, persistent TMA with cross-tile pipelining. The
  variant's kernels are inserted when the program lacks them. Parameters start from the
  launch measured best for that variant and regime (:data:`STARTS`, docs/results-gpu-kernel.md),
  one of them moved half the time.
- ``tune_rule``: one integer of one rule (a tile side, warps, pipeline depth, group size,
  split count, flattening) to a neighbouring value.
- ``rule_bound``: one bound of M in a rule's test to the neighbouring power of two.
- ``drop_rule``: a rule removed (its shapes fall through to the next).
- ``launch_family``, ``feature_rule`` (tuner_moves.py): the launches a tuner sweeps, derived
  from shape features (pipelines filling shared memory, wave-filling tile widths, split-K
  where tiles are few, persistent and stream-K scheduling), and rule tests on shape features.
- ``recombine`` (recombination.py): a dispatch routing each feature bucket to the best launch
  measured there across the parent and its inspirations.

The tiled kernel's configs keep gemm-tiling's six rule mutations (``field``, ``threshold``,
``add_rule``, ``delete_rule``, ``borrow``, ``directed``) on ``choose_config``. Programs are read
with ``ast``, never run; each edit is one or two hunks unique in the parent, inside the EVOLVE
block, whose child parses.
"""

from __future__ import annotations

import ast

import numpy as np

from codevolve.core.diff import Hunk
from codevolve.core.problem import Mutation, TreeMutation
from codevolve.core.prompt import Prompt
from codevolve.problems.gemm_kernel_gpu.dispatch_rules import (
    Rule,
    fits,
    has_block,
    line_hunk,
    neighbour,
    rules_of,
)
from codevolve.problems.gemm_kernel_gpu.kernel_source import (
    LAUNCH_ARGS,
    REGIME_TESTS,
    VARIANTS,
    add_rule,
)
from codevolve.problems.gemm_kernel_gpu.recombination import recombine
from codevolve.problems.gemm_kernel_gpu.shape_features import bucket_of, case_shapes
from codevolve.problems.gemm_kernel_gpu.tuner_moves import feature_rule, launch_family
from codevolve.problems.gemm_tiling.mutations import gemm_mutations

# Starting parameters per (variant, regime): the best launch of each family in the first H200
# sweep (bench/gpu_kernel.py variants; docs/results-gpu-kernel.md).
STARTS: dict[tuple[str, str], tuple[int, ...]] = {
    ("split_k", "decode"): (16, 64, 128, 4, 4, 4),
    ("split_k", "mid"): (64, 64, 128, 4, 4, 2),
    ("persistent", "decode"): (16, 64, 128, 4, 5, 1),
    ("persistent", "mid"): (64, 128, 64, 4, 4, 8),
    ("persistent", "prefill"): (128, 128, 64, 4, 3, 8),
    ("tma", "mid"): (64, 128, 64, 4, 4, 8),
    ("tma", "prefill"): (128, 128, 64, 4, 4, 8),
    ("tma_persistent", "mid"): (128, 128, 64, 8, 4, 8, 1),
    ("tma_persistent", "prefill"): (128, 256, 64, 8, 3, 8, 1),
    # Not in that sweep: the usual Hopper tiles for the tail-split and stream-K kernels, and the
    # plain kernel with narrow tiles (decode) or the tutorial's mid-size tile.
    ("tail_split", "mid"): (128, 128, 64, 4, 4, 8),
    ("tail_split", "prefill"): (128, 128, 64, 8, 4, 8),
    ("stream_k", "mid"): (128, 128, 64, 4, 4, 8),
    ("stream_k", "prefill"): (128, 128, 64, 8, 4, 8),
    ("split_k_fused", "decode"): (16, 64, 128, 4, 4, 4),
    ("split_k_fused", "mid"): (64, 64, 128, 4, 4, 2),
    ("persistent_tail", "mid"): (128, 128, 64, 8, 4, 8, 1),
    ("persistent_tail", "prefill"): (128, 256, 64, 8, 3, 8, 1),
    ("persistent_stream_k", "mid"): (128, 128, 64, 8, 4, 8, 1),
    ("persistent_stream_k", "prefill"): (128, 256, 64, 8, 3, 8, 1),
    ("persistent_stream_k_fused", "mid"): (128, 128, 64, 8, 4, 8, 1),
    ("persistent_stream_k_fused", "prefill"): (128, 256, 64, 8, 3, 8, 1),
    # The tail's pieces share each tile's sum: the fastest launch on 11 of 140 shapes in its
    # first H100 sweep, all with this tile (M = 512-6144).
    ("persistent_tail_shared", "prefill"): (128, 256, 64, 8, 3, 8, 1),
    # Tiles 96 (64 + 32), 160 and 192 wide: cuBLAS's kind of widths where it fills one wave.
    # 128x96 was the mid-size winner among them on the H100; there 128x160 ran 1.4x faster with
    # 4 warps than with 8, and 128x192 persistent 1.3x faster without flattening
    # (bench/gpu_kernel_probe.py --sections wide).
    ("tma_wide", "mid"): (128, 64, 64, 4, 4, 8, 32),
    ("tma_wide", "prefill"): (128, 128, 64, 4, 4, 8, 32),
    ("tma_persistent_wide", "prefill"): (128, 128, 64, 8, 4, 8, 0, 64),
    # (tma_wide_split has no start: two H100 sweeps found it the fastest launch on no shape,
    # at most 0.86 of the best one; docs/results-gpu-kernel.md.)
    ("plain", "decode"): (16, 32, 128, 4, 5, 1),
    ("plain", "mid"): (64, 128, 64, 4, 4, 8),
    # A weight-streaming decode kernel: up to four tokens per program, 16 weight rows, 256-wide
    # K steps.
    ("gemv", "decode"): (4, 16, 256, 4, 3),
}
# Chances of each (variant, regime) start being drawn, relative: the first sweep's largest gains
# over the initial program (persistent TMA on prefill, split-K on narrow or K-long decode shapes)
# are tried more often than the launches that lost everywhere.
START_WEIGHTS = {("tma_persistent", "prefill"): 4.0, ("split_k", "decode"): 3.0}
NARROW_SHARE = 0.5  # how often add_variant narrows its rule to one shape's feature bucket
MOVE_SHARE = 0.5  # how often add_variant moves one starting parameter
KIND_WEIGHTS = {
    "add_variant": 3.0,
    "tune_rule": 3.0,
    "launch_family": 3.0,
    "feature_rule": 2.0,
    "recombine": 2.0,
}


def add_variant(
    source: str, tree: ast.Module, prompt: Prompt, rng: np.random.Generator
) -> list[Hunk] | None:
    starts = [start for start in STARTS if fits(source, start[0])]
    if not starts:
        return None
    weights = np.array([START_WEIGHTS.get(start, 1.0) for start in starts])
    (name, regime) = starts[int(rng.choice(len(starts), p=weights / weights.sum()))]
    variant = VARIANTS[name]
    args = list(STARTS[(name, regime)])
    if rng.random() < MOVE_SHARE:
        index = int(rng.integers(len(args)))
        args[index] = neighbour(variant.values[index], args[index], rng)
    test = REGIME_TESTS[regime]
    in_regime = [s for s in case_shapes(prompt.parent) if _regime(s[0]) == regime]
    if in_regime and rng.random() < NARROW_SHARE:
        # the shapes alike in features, never one (N, K) pair: a pair does not carry over
        test = bucket_of(in_regime[int(rng.integers(len(in_regime)))]).test()
    return add_rule(source, test, variant, tuple(args))


def _regime(m: int) -> str:
    return "decode" if m <= 16 else "prefill" if m >= 1024 else "mid"


def _pick_rule(tree: ast.Module, rng: np.random.Generator) -> Rule | None:
    rules = rules_of(tree)
    return rules[int(rng.integers(len(rules)))] if rules else None


def tune_rule(
    source: str, tree: ast.Module, prompt: Prompt, rng: np.random.Generator
) -> list[Hunk] | None:
    del prompt
    rule = _pick_rule(tree, rng)
    if rule is None:
        return None
    index = int(rng.integers(len(rule.args)))
    args = list(rule.args)
    args[index] = neighbour(rule.variant.values[index], args[index], rng)
    line = source.split("\n")[rule.call]
    indent = line[: len(line) - len(line.lstrip())]
    call = f"{rule.variant.launcher}({LAUNCH_ARGS}, {', '.join(map(str, args))})"
    return line_hunk(source, rule.call, rule.call + 1, [f"{indent}return {call}"])


def rule_bound(
    source: str, tree: ast.Module, prompt: Prompt, rng: np.random.Generator
) -> list[Hunk] | None:
    del prompt
    rule = _pick_rule(tree, rng)
    if rule is None:
        return None
    bounds = [
        node
        for node in ast.walk(rule.test)
        if isinstance(node, ast.Compare)
        and isinstance(node.left, ast.Name)
        and node.left.id == "M"
        and isinstance(node.comparators[0], ast.Constant)
        and type(node.comparators[0].value) is int
    ]
    if not bounds:
        return None
    bound = bounds[int(rng.integers(len(bounds)))].comparators[0]
    assert isinstance(bound, ast.Constant) and type(bound.value) is int
    powers = tuple(2**i for i in range(14))
    bound.value = neighbour(powers, bound.value, rng)
    line = source.split("\n")[rule.first]
    indent = line[: len(line) - len(line.lstrip())]
    return line_hunk(source, rule.first, rule.first + 1, [f"{indent}if {ast.unparse(rule.test)}:"])


def drop_rule(
    source: str, tree: ast.Module, prompt: Prompt, rng: np.random.Generator
) -> list[Hunk] | None:
    del prompt
    rule = _pick_rule(tree, rng)
    if rule is None:
        return None
    lines = source.split("\n")
    kept = lines[rule.call + 1] if rule.call + 1 < len(lines) else ""
    if not kept.strip():
        return None
    return line_hunk(source, rule.first, rule.call + 2, [kept])


def kernel_mutations() -> tuple[Mutation, ...]:
    """The kernel moves, then gemm-tiling's mutations of ``choose_config``."""
    moves: tuple[Mutation, ...] = (
        TreeMutation("add_variant", add_variant, KIND_WEIGHTS["add_variant"], applies=has_block),
        TreeMutation("tune_rule", tune_rule, KIND_WEIGHTS["tune_rule"], applies=has_block),
        TreeMutation("rule_bound", rule_bound, applies=has_block),
        TreeMutation("drop_rule", drop_rule, applies=has_block),
        TreeMutation(
            "launch_family", launch_family, KIND_WEIGHTS["launch_family"], applies=has_block
        ),
        TreeMutation("feature_rule", feature_rule, KIND_WEIGHTS["feature_rule"], applies=has_block),
        TreeMutation("recombine", recombine, KIND_WEIGHTS["recombine"], applies=has_block),
    )
    return moves + gemm_mutations()
