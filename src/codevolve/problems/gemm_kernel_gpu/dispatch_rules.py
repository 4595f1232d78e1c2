"""The dispatch rules of a kernel program's ``matmul``, as the moves read and edit them.

A rule is ``if <test>: return launch_<variant>(x, w, y, workspace, num_sms, <ints>)``
(kernel_source.py). The moves of mutations.py, tuner_moves.py and recombination.py read rules
with :func:`rules_of`, check that a new variant's kernels keep the child within a job's
default ``max_code_length`` (:func:`fits`), and edit lines with :func:`line_hunk`.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codevolve.core.config import RunConfig
from codevolve.core.diff import Hunk, unique_line_hunk
from codevolve.problems.gemm_kernel_gpu.kernel_source import (
    LAUNCH_ARGS,
    VARIANTS,
    Variant,
    entry_function,
    evolve_region,
    variant_source,
)

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


def has_block(source: str) -> bool:
    return evolve_region(source) is not None


def fits(source: str, name: str) -> bool:
    """Whether a rule for the variant keeps the program within :data:`MAX_PROGRAM_CHARS` (a
    variant the program already holds adds only its rule)."""
    held = f"def {VARIANTS[name].launcher}(" in source
    kernels = 0 if held else len(variant_source(name))
    return len(source) + kernels + RULE_CHARS <= MAX_PROGRAM_CHARS


def neighbour(values: Sequence[int], current: int, rng: np.random.Generator) -> int:
    if current not in values:
        return values[int(rng.integers(len(values)))]
    at = values.index(current)
    steps = [i for i in (at - 1, at + 1) if 0 <= i < len(values)]
    return values[steps[int(rng.integers(len(steps)))]]


def line_hunk(source: str, start: int, end: int, new_lines: list[str]) -> list[Hunk] | None:
    region = evolve_region(source)
    if region is None or not (region[0] <= start and end <= region[1]):
        return None
    hunk = unique_line_hunk(source, start=start, end=end, new_lines=new_lines, region=region)
    return None if hunk is None else [hunk]
