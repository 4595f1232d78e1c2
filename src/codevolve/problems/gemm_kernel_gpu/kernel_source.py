"""The kernel program as text: the initial program, the kernel variants, and dispatch rules.

A program's ``matmul`` ends in the default launch (``return launch_tiled(...)``); dispatch rules
stand before it, one ``if`` each, first match wins::

    if M <= 16:
        return launch_split_k(x, w, y, workspace, num_sms, 16, 64, 128, 4, 4, 8)

A rule names a variant's launcher (``launch_<variant>``) and its integer parameters
(:data:`VARIANTS`). Adding a rule for a variant the program lacks inserts the variant's kernels
and launcher (``variants/<name>.txt``) before ``def matmul``. Edits are SEARCH/REPLACE hunks built
with :func:`~codevolve.core.diff.unique_line_hunk`, as every mutation's are; sources are read with
``ast``, never run.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from importlib import resources

from codevolve.core.diff import Hunk, unique_line_hunk
from codevolve.core.evolve_block import EVOLVE_END, EVOLVE_START
from codevolve.core.pysource import parse_python

ENTRY_POINT = "matmul"
LAUNCH_ARGS = "x, w, y, workspace, num_sms"  # what every launcher takes before its parameters


@dataclass(frozen=True, slots=True)
class Variant:
    """A kernel family a dispatch rule can launch: its parameters and their value sets."""

    name: str
    params: tuple[str, ...]
    values: tuple[tuple[int, ...], ...]  # per parameter, the values mutations choose from

    @property
    def launcher(self) -> str:
        return f"launch_{self.name}"


_TILE = (
    ("block_m", (16, 32, 64, 128, 256)),
    ("block_n", (16, 32, 64, 128, 256)),
    ("block_k", (32, 64, 128)),
    ("warps", (2, 4, 8)),
    # Up to the depths that fill an H100's shared memory with small tiles (64x64 tiles 14 deep),
    # as cuBLAS's kernels do; a depth a tile cannot fit fails to compile on the GPU.
    ("stages", (2, 3, 4, 5, 6, 7, 8, 10, 12, 14)),
)
_GROUP = ("group_m", (1, 4, 8))


def _variant(name: str, *extra: tuple[str, tuple[int, ...]]) -> Variant:
    params = (*_TILE, *extra)
    return Variant(name, tuple(p for p, _ in params), tuple(v for _, v in params))


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        _variant("split_k", ("split_k", (2, 3, 4, 6, 8, 16))),
        _variant("persistent", _GROUP),
        _variant("tma", _GROUP),
        _variant("tma_persistent", _GROUP, ("flatten", (0, 1))),
        _variant("tail_split", _GROUP),
        _variant("stream_k", _GROUP),
        _variant("persistent_tail", _GROUP, ("flatten", (0, 1))),
        _variant("persistent_stream_k", _GROUP, ("flatten", (0, 1))),
        _variant("persistent_stream_k_fused", _GROUP, ("flatten", (0, 1))),
        # persistent_tail whose pieces wait for each other and share each tile's sum (every
        # program on the GPU at once; on the CPU, where the interpreter runs programs one by
        # one, it splits no tile: its split path is checked on the GPU).
        _variant("persistent_tail_shared", _GROUP, ("flatten", (0, 1))),
        _variant("split_k_fused", ("split_k", (2, 3, 4, 6, 8, 16))),
        _variant("plain", _GROUP),
        # Tiles block_n + extra_n wide (two dots of power-of-two widths), for one full wave.
        _variant("tma_wide", _GROUP, ("extra_n", (16, 32, 64))),
        _variant("tma_persistent_wide", _GROUP, ("flatten", (0, 1)), ("extra_n", (16, 32, 64))),
        # Wide tiles split along K, summed by the split that finishes last: few large tiles
        # (fewer bytes from L2 per flop) still filling the SMs. Slow on the H100 under Triton
        # 3.6 (no mutation starts it; docs/results-gpu-kernel.md).
        _variant("tma_wide_split", _GROUP, ("split_k", (2, 3, 4, 6, 8)), ("extra_n", (16, 32, 64))),
        # Decode on the CUDA cores: tokens per program instead of a tile's rows, no tensor cores.
        Variant(
            "gemv",
            ("rows", "block_n", "block_k", "warps", "stages"),
            ((1, 2, 4), (8, 16, 32, 64), (128, 256, 512), (2, 4, 8), (1, 2, 3, 4)),
        ),
    )
}
# Regimes a dispatch rule can cover, as the condition it tests (shapes.py's regimes, M alone).
REGIME_TESTS = {"decode": "M <= 16", "mid": "M > 16 and M <= 512", "prefill": "M >= 1024"}


@functools.cache
def initial_program() -> str:
    return (resources.files(__package__) / "initial_program.txt").read_text()


@functools.cache
def variant_source(name: str) -> str:
    """The kernels and launcher of one variant, as inserted before ``def matmul``."""
    return (resources.files(__package__) / "variants" / f"{name}.txt").read_text()


def variant_lines(name: str, source: str) -> list[str]:
    """The variant's lines as inserted into ``source``: without the imports ``source`` already
    has (a name bound twice would hide the program's launches from launches.py)."""
    held = {line for line in source.split("\n") if line.startswith(("import ", "from "))}
    lines = variant_source(name).rstrip("\n").split("\n")
    return [line for line in lines if line not in held]


def evolve_region(source: str) -> tuple[int, int] | None:
    """Line indices ``[first, stop)`` strictly inside the EVOLVE markers, or None."""
    lines = source.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == EVOLVE_START]
    ends = [i for i, line in enumerate(lines) if line.strip() == EVOLVE_END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] <= starts[0]:
        return None
    return starts[0] + 1, ends[0]


def entry_function(tree: ast.Module) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == ENTRY_POINT:
            return node
    return None


def defined_functions(tree: ast.Module) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def rule_lines(condition: str, variant: Variant, args: tuple[int, ...]) -> list[str]:
    call = f"{variant.launcher}({LAUNCH_ARGS}, {', '.join(map(str, args))})"
    return [f"    if {condition}:", f"        return {call}"]


def add_rule(
    source: str, condition: str, variant: Variant, args: tuple[int, ...]
) -> list[Hunk] | None:
    """Hunks that put a dispatch rule first in ``matmul`` (inserting the variant if missing).

    None when the program has no ``matmul`` inside its EVOLVE block to edit.
    """
    region = evolve_region(source)
    tree = parse_python(source)
    entry = entry_function(tree)
    if region is None or entry is None or len(entry.body) < 1:
        return None
    first_statement = _first_dispatch_line(entry)
    hunks = []
    rule = rule_lines(condition, variant, args)
    lines = source.split("\n")
    at = first_statement - 1  # 0-based line of the statement the rule goes before
    if not region[0] <= at < region[1]:
        return None
    rule_hunk = unique_line_hunk(
        source, start=at, end=at + 1, new_lines=[*rule, lines[at]], region=region
    )
    if rule_hunk is None:
        return None
    hunks.append(rule_hunk)
    if variant.launcher not in defined_functions(tree):
        def_line = entry.lineno - 1 - len(entry.decorator_list)
        code = variant_lines(variant.name, source)
        insert = unique_line_hunk(
            source,
            start=def_line,
            end=def_line + 1,
            new_lines=[*code, "", "", lines[def_line]],
            region=region,
        )
        if insert is None or _overlaps(insert, rule_hunk):
            return None
        hunks.insert(0, insert)
    return hunks


def _first_dispatch_line(entry: ast.FunctionDef) -> int:
    """1-based line of the first ``if`` or ``return`` of ``matmul`` (where rules go before)."""
    for statement in entry.body:
        if isinstance(statement, ast.If | ast.Return):
            return statement.lineno
    return entry.body[-1].lineno


def _overlaps(a: Hunk, b: Hunk) -> bool:
    return bool(set(a.search.split("\n")) & set(b.search.split("\n")) - {""})


def apply_hunks(source: str, hunks: list[Hunk]) -> str:
    """The source with each hunk applied in turn (each SEARCH text must occur once)."""
    for hunk in hunks:
        if source.count(hunk.search) != 1:
            raise ValueError(f"hunk does not apply once: {hunk.search[:80]!r}")
        source = source.replace(hunk.search, hunk.replace, 1)
    return source
