"""Mutations of numbers and arithmetic: constants moved by a coarse step or nudged by a fraction
of a percent, and arithmetic operators swapped (``+`` for ``-``). On numeric programs most of the
progress comes from many small steps like these.
"""

from __future__ import annotations

import ast
import math
import re

import numpy as np

from codevolve.proposers.generic.parsed import LineEdit, ParsedSource, byte_slice, literal, splice

FLOAT_FACTORS = (0.5, 0.8, 0.9, 1.1, 1.25, 2.0)
SMALL_INT = 2**31  # below it an int may also jump to a random value in [0, 2 * value + 2]
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


# ------------------------------------------------------------------ constants


def constant_edits(parsed: ParsedSource, rng: np.random.Generator) -> list[LineEdit]:
    edits = []
    for node in parsed.nodes:
        if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
            continue
        if not isinstance(node.value, int | float) or node.end_col_offset is None:
            continue
        row = node.lineno - 1
        if node.end_lineno != node.lineno or not parsed.editable(row, row):
            continue
        line = parsed.lines[row]
        if literal(byte_slice(line, node.col_offset, node.end_col_offset)) != node.value:
            continue  # positions disagree with the text: leave it alone
        new_value = _new_number(node.value, rng)
        if new_value is not None:
            new_line = splice(line, node.col_offset, node.end_col_offset, new_value)
            edits.append(LineEdit(row, row + 1, (new_line,)))
    return edits


def _new_number(value: int | float, rng: np.random.Generator) -> str | None:
    """A nearby value. Int literals are never negative in source (``-3`` is a unary minus)."""
    if isinstance(value, int):
        choices = {value + 1, value - 1, value * 2, value // 2}
        if value < SMALL_INT:
            choices.add(int(rng.integers(0, 2 * value + 3)))
        ordered = sorted(c for c in choices if c >= 0 and c != value)
        return str(ordered[int(rng.integers(len(ordered)))])
    factor = FLOAT_FACTORS[int(rng.integers(len(FLOAT_FACTORS)))]
    scaled = float(f"{value * factor:.6g}") if value != 0.0 else factor / 10
    if not math.isfinite(scaled) or scaled == value:
        return None
    return repr(scaled)


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
        if literal(byte_slice(line, node.col_offset, node.end_col_offset)) != node.value:
            continue
        new_value = nudged(node.value, rng)
        if new_value is not None:
            new_line = splice(line, node.col_offset, node.end_col_offset, new_value)
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
    between = byte_slice(line, gap[0], gap[1])
    text = OPERATOR_TEXT[type(op)] + suffix
    # The gap holds only brackets, spaces and the operator itself.
    match = re.fullmatch(rf"([\s)]*){re.escape(text)}([\s(]*)", between)
    if match is None:
        return None
    options = BINARY_CHANGES[type(op)]
    new_op = options[int(rng.integers(len(options)))] + suffix
    new_between = match.group(1) + new_op + match.group(2)
    return LineEdit(row, row + 1, (splice(line, gap[0], gap[1], new_between),))
