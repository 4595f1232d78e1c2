"""Mutations of control and statements: comparisons flipped, conditions negated, adjacent
statements swapped, a call replaced by another the program already makes (``min`` for ``max``),
and a statement duplicated with a nudged constant (an update applied twice).
"""

from __future__ import annotations

import ast
import io
import itertools
import tokenize

import numpy as np

from codevolve.proposers.generic.arithmetic import nudged
from codevolve.proposers.generic.parsed import (
    LineEdit,
    ParsedSource,
    byte_slice,
    char_span,
    literal,
    splice,
    whole_line_simple,
)

OPERATOR_CHANGES: dict[str, tuple[str, ...]] = {
    "<": ("<=", ">"),
    "<=": ("<", ">="),
    ">": (">=", "<"),
    ">=": (">", "<="),
    "==": ("!=", "<=", ">="),
    "!=": ("==",),
}

# ---------------------------------------------------------------- comparisons


def comparison_edits(parsed: ParsedSource, rng: np.random.Generator) -> list[LineEdit]:
    fstring_spans = [
        char_span(parsed.lines, n) for n in ast.walk(parsed.tree) if isinstance(n, ast.JoinedStr)
    ]
    edits = []
    for token in _tokens(parsed.source):
        if token.type != tokenize.OP or token.string not in OPERATOR_CHANGES:
            continue
        row = token.start[0] - 1
        if not parsed.editable(row, row) or any(lo <= token.start < hi for lo, hi in fstring_spans):
            continue
        options = OPERATOR_CHANGES[token.string]
        new_op = options[int(rng.integers(len(options)))]
        line = parsed.lines[row]
        new_line = line[: token.start[1]] + new_op + line[token.end[1] :]
        edits.append(LineEdit(row, row + 1, (new_line,)))
    return edits


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return []


# ----------------------------------------------------------------- statements


def swap_edits(parsed: ParsedSource, rng: np.random.Generator) -> list[LineEdit]:
    """Swap two adjacent one-line simple statements of the same block."""
    del rng  # every adjacent pair is one candidate; the caller picks among them
    edits = []
    for node in ast.walk(parsed.tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for first, second in itertools.pairwise(block):
                if _swappable(parsed, first, second):
                    row = first.lineno - 1
                    pair = (parsed.lines[row + 1], parsed.lines[row])
                    edits.append(LineEdit(row, row + 2, pair))
    return edits


def _swappable(parsed: ParsedSource, first: ast.stmt, second: ast.stmt) -> bool:
    if not all(whole_line_simple(parsed, s) for s in (first, second)):
        return False
    row = first.lineno - 1
    return (
        second.lineno == first.lineno + 1
        and first.col_offset == second.col_offset
        and parsed.lines[row].strip() != parsed.lines[row + 1].strip()
        and parsed.editable(row, row + 1)
    )


# ----------------------------------------------------------------- conditions


def negate_edits(parsed: ParsedSource, rng: np.random.Generator) -> list[LineEdit]:
    """``if c:`` becomes ``if not (c):``, and ``if not c:`` becomes ``if c:``."""
    del rng
    edits = []
    for node in ast.walk(parsed.tree):
        if not isinstance(node, ast.If) or node.test.end_lineno != node.test.lineno:
            continue
        test, row = node.test, node.test.lineno - 1
        if test.end_col_offset is None or not parsed.editable(row, row):
            continue
        line = parsed.lines[row]
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            operand = test.operand  # on the test's line, as the test is on one line
            new_text = byte_slice(line, operand.col_offset, operand.end_col_offset)
        else:
            new_text = f"not ({byte_slice(line, test.col_offset, test.end_col_offset)})"
        new_line = splice(line, test.col_offset, test.end_col_offset, new_text)
        edits.append(LineEdit(row, row + 1, (new_line,)))
    return edits


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
        if byte_slice(line, func.col_offset, func.end_col_offset) != name:
            continue
        other = others[int(rng.integers(len(others)))]
        edits.append(
            LineEdit(row, row + 1, (splice(line, func.col_offset, func.end_col_offset, other),))
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
        if not isinstance(node, ast.stmt) or not whole_line_simple(parsed, node):
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
    if literal(byte_slice(line, node.col_offset, node.end_col_offset)) != value:
        return line
    new_value = nudged(value, rng)
    if new_value is None:
        return line
    return splice(line, node.col_offset, node.end_col_offset, new_value)
