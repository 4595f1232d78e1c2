"""More mutations for any Python program: fine constant nudges, arithmetic operators, calls swapped
among those the program already makes, and a duplicated line with an edit.

They complement :mod:`codevolve.proposers.generic` (coarse constant jumps, comparisons, statement
order, negated conditions) on numeric programs, where progress comes from many small steps: a
float nudged by a fraction of a percent, ``+`` turned into ``-``, ``min`` tried as ``max``, one
update applied twice. Same rules: sites found with ``ast``, kept to the EVOLVE-BLOCK regions, one
unique SEARCH/REPLACE hunk that leaves a parsable child, or None.
"""

from __future__ import annotations

import ast
import math
import re

import numpy as np

from codevolve.proposers.generic import (
    LineEdit,
    ParsedSource,
    _byte_slice,
    _literal,
    _splice,
    _whole_line_simple,
)

NUDGE_SCALES = (1e-3, 1e-2, 5e-2, 0.2)  # relative standard deviations a nudge draws from
ZERO_NUDGE = 0.05  # standard deviation of a nudge of 0.0
SIGNIFICANT = 6  # digits a nudged float keeps, so children stay readable
BINARY_CHANGES: dict[type[ast.operator], tuple[str, ...]] = {
    ast.Add: ("-", "*"),
    ast.Sub: ("+",),
    ast.Mult: ("/", "+"),
    ast.Div: ("*", "//"),
    ast.FloorDiv: ("/",),
    ast.Pow: ("*",),
    ast.Mod: ("//",),
}
OPERATOR_TEXT: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Pow: "**",
    ast.Mod: "%",
}


# ------------------------------------------------------------------ nudges


def nudge_edits(parsed: ParsedSource, rng: np.random.Generator) -> list[LineEdit]:
    """Every float literal, multiplied by ``1 + N(0, s)`` with ``s`` drawn from NUDGE_SCALES."""
    edits = []
    for node in parsed.nodes:
        if not isinstance(node, ast.Constant) or type(node.value) is not float:
            continue
        row = node.lineno - 1
        if node.end_lineno != node.lineno or node.end_col_offset is None:
            continue
        if not parsed.editable(row, row):
            continue
        line = parsed.lines[row]
        if _literal(_byte_slice(line, node.col_offset, node.end_col_offset)) != node.value:
            continue
        new_value = nudged(node.value, rng)
        if new_value is not None:
            new_line = _splice(line, node.col_offset, node.end_col_offset, new_value)
            edits.append(LineEdit(row, row + 1, (new_line,)))
    return edits


def nudged(value: float, rng: np.random.Generator) -> str | None:
    """A float close to ``value`` as source text; None if rounding leaves it unchanged."""
    scale = NUDGE_SCALES[int(rng.integers(len(NUDGE_SCALES)))]
    if value == 0.0:
        new = float(rng.normal(0.0, ZERO_NUDGE))
    else:
        new = value * (1.0 + float(rng.normal(0.0, scale)))
    new = float(f"{new:.{SIGNIFICANT}g}")
    if not math.isfinite(new) or new == value:
        return None
    if value >= 0 > new:
        new = -new  # literals are never negative in source; a sign change needs an operator
    return repr(new)


# --------------------------------------------------------------- operators


def operator_edits(parsed: ParsedSource, rng: np.random.Generator) -> list[LineEdit]:
    """``a + b`` becomes ``a - b`` (and the like) in a binary operation or an augmented assignment
    that fits on one line."""
    edits = []
    for node in ast.walk(parsed.tree):
        if isinstance(node, ast.BinOp) and type(node.op) in BINARY_CHANGES:
            left_end, right_start = node.left.end_col_offset, node.right.col_offset
            same_line = node.left.end_lineno == node.lineno == node.right.lineno
            if not same_line or left_end is None:
                continue
            edit = _operator_edit(parsed, node.lineno - 1, (left_end, right_start), node.op, rng)
        elif isinstance(node, ast.AugAssign) and type(node.op) in BINARY_CHANGES:
            target_end, value_start = node.target.end_col_offset, node.value.col_offset
            if node.target.end_lineno != node.lineno or target_end is None:
                continue
            edit = _operator_edit(
                parsed, node.lineno - 1, (target_end, value_start), node.op, rng, suffix="="
            )
        else:
            continue
        if edit is not None:
            edits.append(edit)
    return edits


def _operator_edit(
    parsed: ParsedSource,
    row: int,
    gap: tuple[int, int],
    op: ast.operator,
    rng: np.random.Generator,
    *,
    suffix: str = "",
) -> LineEdit | None:
    """Replace the operator found between byte offsets ``gap`` of line ``row``."""
    if not parsed.editable(row, row) or gap[1] <= gap[0]:
        return None
    line = parsed.lines[row]
    between = _byte_slice(line, gap[0], gap[1])
    text = OPERATOR_TEXT[type(op)] + suffix
    # The gap holds only brackets, spaces and the operator itself.
    match = re.fullmatch(rf"([\s)]*){re.escape(text)}([\s(]*)", between)
    if match is None:
        return None
    options = BINARY_CHANGES[type(op)]
    new_op = options[int(rng.integers(len(options)))] + suffix
    new_between = match.group(1) + new_op + match.group(2)
    return LineEdit(row, row + 1, (_splice(line, gap[0], gap[1], new_between),))


# -------------------------------------------------------------------- calls


def swap_call_edits(parsed: ParsedSource, rng: np.random.Generator) -> list[LineEdit]:
    """Call another function the program already calls with as many arguments (``min`` for
    ``max``, ``math.sin`` for ``math.cos``)."""
    calls = [n for n in ast.walk(parsed.tree) if isinstance(n, ast.Call)]
    names_by_arity: dict[int, set[str]] = {}
    for call in calls:
        name = _dotted(call.func)
        if name is not None and not call.keywords:
            names_by_arity.setdefault(len(call.args), set()).add(name)
    edits = []
    for call in calls:
        name, func = _dotted(call.func), call.func
        if name is None or call.keywords or func.end_col_offset is None:
            continue
        row = func.lineno - 1
        if func.end_lineno != func.lineno or not parsed.editable(row, row):
            continue
        others = sorted(names_by_arity.get(len(call.args), set()) - {name})
        if not others:
            continue
        line = parsed.lines[row]
        if _byte_slice(line, func.col_offset, func.end_col_offset) != name:
            continue
        other = others[int(rng.integers(len(others)))]
        edits.append(
            LineEdit(row, row + 1, (_splice(line, func.col_offset, func.end_col_offset, other),))
        )
    return edits


def _dotted(node: ast.expr) -> str | None:
    """``f`` or ``a.b.f`` as written; None for any other callee."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


# --------------------------------------------------------------- duplicates


def duplicate_edits(parsed: ParsedSource, rng: np.random.Generator) -> list[LineEdit]:
    """A one-line assignment or expression statement repeated right after itself, the copy with
    one float nudged when it has one (an update applied twice, or a second variant of it)."""
    edits = []
    for node in ast.walk(parsed.tree):
        if not isinstance(node, ast.stmt) or not _whole_line_simple(parsed, node):
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign) and _defines_constant(node):
            continue  # a second ``X = 1.0`` only shadows the first
        row = node.lineno - 1
        if not parsed.editable(row, row):
            continue
        line = parsed.lines[row]
        copy = _nudged_line(line, node, rng)
        edits.append(LineEdit(row, row + 1, (line, copy)))
    return edits


def _defines_constant(node: ast.Assign | ast.AnnAssign) -> bool:
    value = node.value
    return value is None or isinstance(value, ast.Constant | ast.Tuple | ast.List)


def _nudged_line(line: str, statement: ast.stmt, rng: np.random.Generator) -> str:
    floats = [
        n
        for n in ast.walk(statement)
        if isinstance(n, ast.Constant) and type(n.value) is float and n.end_col_offset is not None
    ]
    if not floats:
        return line
    node = floats[int(rng.integers(len(floats)))]
    value = node.value
    if not isinstance(value, float) or node.end_col_offset is None:
        return line
    if _literal(_byte_slice(line, node.col_offset, node.end_col_offset)) != value:
        return line
    new_value = nudged(value, rng)
    if new_value is None:
        return line
    return _splice(line, node.col_offset, node.end_col_offset, new_value)
