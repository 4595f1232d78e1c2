"""Mutations a kernel engineer would try, as SEARCH/REPLACE edits of a kernel program.

A program dispatches in ``matmul`` (kernel_source.py): rules ``if <test>: return launch_<variant>(
x, w, y, workspace, num_sms, <ints>)`` before the default tiled launch, whose tile config comes
from ``choose_config``. The kernel moves:

- ``add_variant``: a rule launching another kernel family for a regime (decode M <= 16, mid,
  prefill M >= 1024), sometimes for one projection (``N == n and K == k``) only: two-pass
  split-K, persistent tiles, TMA descriptors, persistent TMA with cross-tile pipelining. The
  variant's kernels are inserted when the program lacks them. Parameters start from the
  launch measured best for that variant and regime (:data:`STARTS`, docs/results-gpu-kernel.md),
  one of them moved half the time.
- ``tune_rule``: one integer of one rule (a tile side, warps, pipeline depth, group size,
  split count, flattening) to a neighbouring value.
- ``rule_bound``: one bound of M in a rule's test to the neighbouring power of two.
- ``drop_rule``: a rule removed (its shapes fall through to the next).

The tiled kernel's configs keep gemm-tiling's six rule mutations (``field``, ``threshold``,
``add_rule``, ``delete_rule``, ``borrow``, ``directed``) on ``choose_config``. Programs are read
with ``ast``, never run; each edit is one or two hunks unique in the parent, inside the EVOLVE
block, whose child parses.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codevolve.core.config import RunConfig
from codevolve.core.diff import Hunk, unique_line_hunk
from codevolve.core.problem import Mutation, TreeMutation
from codevolve.core.prompt import Prompt
from codevolve.problems.gemm_kernel_gpu.kernel_source import (
    LAUNCH_ARGS,
    REGIME_TESTS,
    VARIANTS,
    Variant,
    add_rule,
    entry_function,
    evolve_region,
    variant_source,
)
from codevolve.problems.gemm_tiling.mutations import gemm_mutations
from codevolve.problems.gemm_tiling.rule_program import parse_shape

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
PROJECTION_SHARE = 0.5  # how often add_variant narrows its rule to one projection
MOVE_SHARE = 0.5  # how often add_variant moves one starting parameter
KIND_WEIGHTS = {"add_variant": 4.0, "tune_rule": 3.0}
# A job refuses children longer than its max_code_length: a new variant's kernels are only
# proposed while the child stays within the default, rule included.
MAX_PROGRAM_CHARS: int = RunConfig.model_fields["max_code_length"].default
RULE_CHARS = 200


@dataclass(frozen=True, slots=True)
class Rule:
    """A dispatch rule of ``matmul``: its test, its variant and its integer parameters."""

    test: ast.expr
    variant: Variant
    args: tuple[int, ...]
    first: int  # 0-based line of the ``if``
    call: int  # 0-based line of the ``return``


def rules_of(tree: ast.Module) -> list[Rule]:
    """The dispatch rules of ``matmul`` whose launch is a known variant with int parameters."""
    entry = entry_function(tree)
    launchers = {v.launcher: v for v in VARIANTS.values()}
    found = []
    for node in entry.body if entry is not None else []:
        if not (isinstance(node, ast.If) and len(node.body) == 1 and not node.orelse):
            continue
        ret = node.body[0]
        call = ret.value if isinstance(ret, ast.Return) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            continue
        variant = launchers.get(call.func.id)
        tail = call.args[len(LAUNCH_ARGS.split(", ")) :]
        values = [a.value for a in tail if isinstance(a, ast.Constant) and type(a.value) is int]
        if variant is None or len(values) != len(variant.params) or len(values) != len(tail):
            continue
        args = tuple(int(v) for v in values)
        found.append(Rule(node.test, variant, args, node.lineno - 1, ret.lineno - 1))
    return found


def _has_block(source: str) -> bool:
    return evolve_region(source) is not None


def _fits(source: str, name: str) -> bool:
    """Whether a rule for the variant keeps the program within :data:`MAX_PROGRAM_CHARS` (a
    variant the program already holds adds only its rule)."""
    held = f"def {VARIANTS[name].launcher}(" in source
    kernels = 0 if held else len(variant_source(name))
    return len(source) + kernels + RULE_CHARS <= MAX_PROGRAM_CHARS


def add_variant(
    source: str, tree: ast.Module, prompt: Prompt, rng: np.random.Generator
) -> list[Hunk] | None:
    starts = [start for start in STARTS if _fits(source, start[0])]
    if not starts:
        return None
    weights = np.array([START_WEIGHTS.get(start, 1.0) for start in starts])
    (name, regime) = starts[int(rng.choice(len(starts), p=weights / weights.sum()))]
    variant = VARIANTS[name]
    args = list(STARTS[(name, regime)])
    if rng.random() < MOVE_SHARE:
        index = int(rng.integers(len(args)))
        args[index] = _neighbour(variant.values[index], args[index], rng)
    test = REGIME_TESTS[regime]
    shapes = [s for s in (parse_shape(c.key) for c in prompt.parent.cases) if s is not None]
    in_regime = [s for s in shapes if _regime(s[0]) == regime]
    if in_regime and rng.random() < PROJECTION_SHARE:
        _, n, k = in_regime[int(rng.integers(len(in_regime)))]
        test = f"{test} and N == {n} and K == {k}"
    return add_rule(source, test, variant, tuple(args))


def _regime(m: int) -> str:
    return "decode" if m <= 16 else "prefill" if m >= 1024 else "mid"


def _neighbour(values: Sequence[int], current: int, rng: np.random.Generator) -> int:
    if current not in values:
        return values[int(rng.integers(len(values)))]
    at = values.index(current)
    steps = [i for i in (at - 1, at + 1) if 0 <= i < len(values)]
    return values[steps[int(rng.integers(len(steps)))]]


def _pick_rule(tree: ast.Module, rng: np.random.Generator) -> Rule | None:
    rules = rules_of(tree)
    return rules[int(rng.integers(len(rules)))] if rules else None


def _line_hunk(source: str, start: int, end: int, new_lines: list[str]) -> list[Hunk] | None:
    region = evolve_region(source)
    if region is None or not (region[0] <= start and end <= region[1]):
        return None
    hunk = unique_line_hunk(source, start=start, end=end, new_lines=new_lines, region=region)
    return None if hunk is None else [hunk]


def tune_rule(
    source: str, tree: ast.Module, prompt: Prompt, rng: np.random.Generator
) -> list[Hunk] | None:
    del prompt
    rule = _pick_rule(tree, rng)
    if rule is None:
        return None
    index = int(rng.integers(len(rule.args)))
    args = list(rule.args)
    args[index] = _neighbour(rule.variant.values[index], args[index], rng)
    line = source.split("\n")[rule.call]
    indent = line[: len(line) - len(line.lstrip())]
    call = f"{rule.variant.launcher}({LAUNCH_ARGS}, {', '.join(map(str, args))})"
    return _line_hunk(source, rule.call, rule.call + 1, [f"{indent}return {call}"])


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
    bound.value = _neighbour(powers, bound.value, rng)
    line = source.split("\n")[rule.first]
    indent = line[: len(line) - len(line.lstrip())]
    return _line_hunk(source, rule.first, rule.first + 1, [f"{indent}if {ast.unparse(rule.test)}:"])


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
    return _line_hunk(source, rule.first, rule.call + 2, [kept])


def kernel_mutations() -> tuple[Mutation, ...]:
    """The kernel moves, then gemm-tiling's mutations of ``choose_config``."""
    moves: tuple[Mutation, ...] = (
        TreeMutation("add_variant", add_variant, KIND_WEIGHTS["add_variant"], applies=_has_block),
        TreeMutation("tune_rule", tune_rule, KIND_WEIGHTS["tune_rule"], applies=_has_block),
        TreeMutation("rule_bound", rule_bound, applies=_has_block),
        TreeMutation("drop_rule", drop_rule, applies=_has_block),
    )
    return moves + gemm_mutations()
