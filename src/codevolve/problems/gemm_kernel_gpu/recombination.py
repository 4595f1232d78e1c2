"""Crossover guided by measurements: a dispatch built from the best launches measured per bucket.

The parent and its inspirations carry per-shape cases: the shape in the key, the ratio
t_cuBLAS / t in the detail (stages.py). Reading each program's source (launches.py) says which
launch it took on each shape. Shapes are grouped into feature buckets (shape_features.py); in
each bucket the launch with the highest geomean ratio over the shapes it was measured on, in
any of the programs, is the bucket's best. ``recombine`` writes the parent's dispatch anew: one
rule per measured bucket, its test the bucket's features (never a shape's (N, K)), its launch
that bucket's best, the parent's final launch kept for the shapes of buckets nothing measured.
The kernels of a variant the parent lacks are inserted (their original text, the kernel code a
rule names in another program may have been edited), while the child stays within a job's
default ``max_code_length``; a bucket whose best does not fit takes its next best.

:func:`measured_table` renders the same per-bucket bests for the LLM's prompt.
"""

from __future__ import annotations

import ast
import functools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codevolve.core.diff import Hunk, unique_line_hunk
from codevolve.core.program import CaseResult
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.problems.gemm_kernel_gpu.dispatch_rules import MAX_PROGRAM_CHARS
from codevolve.problems.gemm_kernel_gpu.kernel_source import (
    VARIANTS,
    entry_function,
    evolve_region,
    rule_lines,
    variant_lines,
    variant_source,
)
from codevolve.problems.gemm_kernel_gpu.launches import PARAMS, launch_keys
from codevolve.problems.gemm_kernel_gpu.shape_features import (
    Bucket,
    Launch,
    Shape,
    bucket_of,
    sms_of,
)
from codevolve.problems.gemm_tiling.rule_program import parse_shape

_LAUNCHERS = {variant.launcher: variant for variant in VARIANTS.values()}
TILED_HELPERS = ("def launch_tiled(", "def GemmConfig(")  # what the plain variant calls
MEASURED_PROGRAMS = 256  # programs whose measured launches are kept read


@dataclass(frozen=True, slots=True)
class Measurement:
    """One program's launch on one shape and its ratio t_cuBLAS / t (higher is better)."""

    shape: Shape
    launch: Launch
    ratio: float
    program: int  # 0: the parent; i: the i-th inspiration


@dataclass(frozen=True, slots=True)
class Candidate:
    """A launch measured in a bucket: its geomean ratio over the shapes it was measured on."""

    launch: Launch
    ratio: float
    shapes: int
    program: int  # the first program (0: the parent) that took it there


def launch_of(text: str) -> Launch | None:
    """The variant launch a launch key names (``launch_<variant>(x, w, y, workspace, num_sms,
    <ints>)``); the tiled kernel's ``launch_tiled(x, w, y, GemmConfig(<ints>))`` as the plain
    variant with those ints. None for any other launch."""
    try:
        call = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    args: list[ast.expr] = list(call.args)
    config = args[-1] if args else None
    if call.func.id == "launch_tiled" and len(args) == 4 and isinstance(config, ast.Call):
        name, ints = "plain", list(config.args)
    elif call.func.id in _LAUNCHERS:
        name, ints = _LAUNCHERS[call.func.id].name, args[len(PARAMS) :]
    else:
        return None
    values = [a.value for a in ints if isinstance(a, ast.Constant) and type(a.value) is int]
    if len(values) != len(ints) or len(values) != len(VARIANTS[name].params):
        return None
    return Launch(name, tuple(values))


def measurements(view: ProgramView, program: int) -> list[Measurement]:
    """The program's measured launch per shape of its cases; none where its source is outside
    the form launches.py reads."""
    return [
        Measurement(shape, launch, ratio, program)
        for shape, launch, ratio in _measured(view.source, view.cases)
    ]


@functools.lru_cache(maxsize=MEASURED_PROGRAMS)
def _measured(
    source: str, cases: tuple[CaseResult, ...]
) -> tuple[tuple[Shape, Launch, float], ...]:
    """Read once per program: parents and inspirations recur from prompt to prompt, and reading
    a dispatch for every shape takes tens of milliseconds."""
    ratios: dict[Shape, float] = {}
    for case in cases:
        shape = parse_shape(case.key)
        try:
            ratio = float(case.detail)
        except ValueError:
            continue
        if shape is not None and math.isfinite(ratio) and ratio > 0:
            ratios[shape] = ratio
    keys = launch_keys(source, list(ratios)) if ratios else None
    if keys is None:
        return ()
    launches = {shape: launch_of(keys[shape].launch) for shape in ratios}
    return tuple(
        (shape, launch, ratio)
        for shape, ratio in ratios.items()
        if (launch := launches[shape]) is not None
    )


def ranked(views: Sequence[ProgramView], sms: int) -> dict[Bucket, list[Candidate]]:
    """Per measured bucket, its launches best first (geomean ratio, then shapes measured)."""
    pooled: dict[Bucket, dict[Launch, list[Measurement]]] = defaultdict(lambda: defaultdict(list))
    for index, view in enumerate(views):
        for found in measurements(view, index):
            pooled[bucket_of(found.shape, sms)][found.launch].append(found)
    table = {}
    for bucket, launches in pooled.items():
        candidates = [
            Candidate(
                launch=launch,
                ratio=_geomean([m.ratio for m in found]),
                shapes=len({m.shape for m in found}),
                program=min(m.program for m in found),
            )
            for launch, found in launches.items()
        ]
        candidates.sort(key=lambda c: (-c.ratio, -c.shapes, str(c.launch)))
        table[bucket] = candidates
    return dict(sorted(table.items()))


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def measured_table(parent: ProgramView, inspirations: Sequence[ProgramView]) -> str:
    """The prompt's section: per bucket, the best measured launch and its ratio, beside the
    current program's; "" when no program shown has a measured shape."""
    sms = sms_of(parent)
    table = ranked([parent, *inspirations], sms)
    if not table:
        return ""
    mine = ranked([parent], sms)
    lines = [
        "## Best measured launch per shape-feature bucket",
        "",
        "Shapes grouped by features that carry to unseen shapes (a dispatch rule keyed on "
        f"(N, K) pairs does not), over {sms} SMs; ratios are t_cuBLAS / t (higher is better), "
        "geomeans over the bucket's shapes measured with that launch, across the current "
        "program and the programs shown.",
    ]
    for bucket, candidates in table.items():
        best = candidates[0]
        source = "the current program" if best.program == 0 else f"program {best.program}"
        own = _parent_ratio(mine.get(bucket, []))
        lines += [
            f"- {bucket.label()}: `if {bucket.test(sms)}:`",
            f"  best `{best.launch.call}`: {best.ratio:.3f} over {_shapes(best.shapes)} "
            f"({source}); current program {own}",
        ]
    return "\n".join(lines)


def _parent_ratio(candidates: list[Candidate]) -> str:
    if not candidates:
        return "not measured here"
    shapes = sum(c.shapes for c in candidates)
    log_sum = sum(c.shapes * math.log(c.ratio) for c in candidates)
    return f"{math.exp(log_sum / shapes):.3f} over {_shapes(shapes)}"


def _shapes(count: int) -> str:
    return f"{count} shape" if count == 1 else f"{count} shapes"


def recombine(
    source: str, tree: ast.Module, prompt: Prompt, rng: np.random.Generator
) -> list[Hunk] | None:
    del rng  # the measurements decide
    sms = sms_of(prompt.parent)
    table = ranked([prompt.parent, *prompt.inspirations], sms)
    entry = entry_function(tree)
    region = evolve_region(source)
    if not table or entry is None or region is None:
        return None
    body = entry.body
    first = next((i for i, s in enumerate(body) if isinstance(s, ast.If | ast.Return)), None)
    final = body[-1]
    if first is None or not isinstance(final, ast.Return):
        return None
    if not all(isinstance(s, ast.If) for s in body[first:-1]):
        return None  # a dispatch with other statements: not rewritten
    lines = source.split("\n")
    def_line = entry.lineno - 1 - len(entry.decorator_list)
    dispatch_start = body[first].lineno - 1
    end = final.end_lineno or final.lineno
    kept = len(source) - len("\n".join(lines[dispatch_start : final.lineno - 1]))
    chosen, inserted = _choose(table, source, budget=MAX_PROGRAM_CHARS - kept, sms=sms)
    if not chosen:
        return None
    new_lines = [
        *_joined(inserted, source),
        *lines[def_line:dispatch_start],
        *(line for bucket, launch in chosen for line in _rule(bucket, launch, sms)),
        *lines[final.lineno - 1 : end],
    ]
    if not (region[0] <= def_line and end <= region[1]) or new_lines == lines[def_line:end]:
        return None
    hunk = unique_line_hunk(source, start=def_line, end=end, new_lines=new_lines, region=region)
    return None if hunk is None else [hunk]


def _joined(inserted: list[str], source: str) -> list[str]:
    """The inserted variants' kernels and launchers, each followed by two blank lines (an
    import the program or an earlier variant holds is not repeated)."""
    joined: list[str] = []
    for name in inserted:
        joined += [*variant_lines(name, "\n".join([source, *joined])), "", ""]
    return joined


def _rule(bucket: Bucket, launch: Launch, sms: int) -> list[str]:
    return rule_lines(bucket.test(sms), VARIANTS[launch.variant], launch.args)


def _choose(
    table: dict[Bucket, list[Candidate]], source: str, *, budget: int, sms: int
) -> tuple[list[tuple[Bucket, Launch]], list[str]]:
    """Per bucket (the most measured first), the best launch whose rule, and kernels where the
    program lacks them, fit in ``budget`` characters; and the variants to insert."""
    chosen: list[tuple[Bucket, Launch]] = []
    inserted: list[str] = []
    used = 0
    tiled = all(helper in source for helper in TILED_HELPERS)
    for bucket in sorted(table, key=lambda b: (-sum(c.shapes for c in table[b]), b)):
        for candidate in table[bucket]:
            name = candidate.launch.variant
            if name == "plain" and not tiled:
                continue
            held = name in inserted or f"def {VARIANTS[name].launcher}(" in source
            cost = len("\n".join(_rule(bucket, candidate.launch, sms))) + 1
            cost += 0 if held else len(variant_source(name)) + 2
            if used + cost <= budget:
                used += cost
                chosen.append((bucket, candidate.launch))
                inserted += [] if held else [name]
                break
    return sorted(chosen), inserted
