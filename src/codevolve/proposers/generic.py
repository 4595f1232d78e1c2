"""Mutations that work on any Python program: constants, comparisons, statements, conditions.

Each mutation finds its edit sites with ``ast`` and ``tokenize`` (so text inside strings and
comments is never touched), keeps to the EVOLVE-BLOCK regions (the whole file when there are no
markers), and emits one SEARCH/REPLACE hunk that occurs exactly once in the parent and leaves a
child that parses. It returns None when the parent offers no such site.
"""

from __future__ import annotations

import ast
import functools
import io
import itertools
import math
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from codevolve.core.diff import Diff
from codevolve.core.prompt import Prompt
from codevolve.core.pysource import parse_python
from codevolve.proposers.source_edit import Region, child_of, editable_regions, line_hunk, region_of

MAX_SITES_TRIED = 16  # sites tried per proposal before giving up
PARSED_PARENTS = 256  # parents whose parse is kept: most proposals draw one of a few elites
FLOAT_FACTORS = (0.5, 0.8, 0.9, 1.1, 1.25, 2.0)
SMALL_INT = 2**31  # below it an int may also jump to a random value in [0, 2 * value + 2]
OPERATOR_CHANGES: dict[str, tuple[str, ...]] = {
    "<": ("<=", ">"),
    "<=": ("<", ">="),
    ">": (">=", "<"),
    ">=": (">", "<="),
    "==": ("!=", "<=", ">="),
    "!=": ("==",),
}
SIMPLE_STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)


@dataclass(frozen=True, slots=True)
class LineEdit:
    """Replace lines ``[start, end)`` (0-based) by ``new_lines``."""

    start: int
    end: int
    new_lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ParsedSource:
    """A parent as the finders read it. Shared by every proposal of the same parent (see
    :func:`parse_source`): finders only read it."""

    source: str
    lines: list[str]
    tree: ast.Module
    regions: tuple[Region, ...]
    nodes: tuple[ast.AST, ...]  # every node of the tree outside f-strings, in walk order

    def editable(self, first: int, last: int) -> bool:
        return region_of(self.regions, first, last) is not None


EditFinder = Callable[[ParsedSource, np.random.Generator], list[LineEdit]]


@dataclass(frozen=True, slots=True)
class GenericMutation:
    """A mutation made of a finder of candidate edits; one of them, at random, is emitted."""

    kind: str
    find_edits: EditFinder
    weight: float = 1.0  # relative chance of being tried first among the generic mutations

    def propose(self, prompt: Prompt, rng: np.random.Generator) -> str | None:
        parsed = parse_source(prompt.parent.source)
        if parsed is None:
            return None
        return first_applicable(parsed, self.find_edits(parsed, rng), rng)


def generic_mutations() -> tuple[GenericMutation, ...]:
    # Imported here: generic_extra builds on this module's helpers.
    from codevolve.proposers import generic_extra as extra

    return (
        GenericMutation("constant", constant_edits),
        GenericMutation("comparison", comparison_edits),
        GenericMutation("swap_statements", swap_edits),
        GenericMutation("negate_condition", negate_edits),
        # Small steps on floats make most of the progress on numeric programs.
        GenericMutation("nudge_constant", extra.nudge_edits, weight=8.0),
        GenericMutation("operator", extra.operator_edits),
        GenericMutation("swap_call", extra.swap_call_edits),
        GenericMutation("duplicate_line", extra.duplicate_edits),
    )


@functools.lru_cache(maxsize=PARSED_PARENTS)
def parse_source(source: str) -> ParsedSource | None:
    """The parent parsed once: the many children of one elite, and the mutations tried for one
    proposal, all read the same parse."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return None
    lines = source.split("\n")
    nodes = tuple(_nodes_outside_fstrings(tree))
    return ParsedSource(source, lines, tree, editable_regions(lines), nodes)


def first_applicable(
    parsed: ParsedSource, edits: list[LineEdit], rng: np.random.Generator
) -> str | None:
    """Render the first edit, in random order, that makes a unique hunk and a parsable child."""
    for index in rng.permutation(len(edits))[:MAX_SITES_TRIED]:
        edit = edits[int(index)]
        region = region_of(parsed.regions, edit.start, max(edit.start, edit.end - 1))
        if region is None:
            continue
        hunk = line_hunk(
            parsed.source, region, start=edit.start, end=edit.end, new_lines=list(edit.new_lines)
        )
        if hunk is not None and child_of(parsed.source, hunk) is not None:
            return Diff((hunk,)).render()
    return None


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
        if _literal(_byte_slice(line, node.col_offset, node.end_col_offset)) != node.value:
            continue  # positions disagree with the text: leave it alone
        new_value = _new_number(node.value, rng)
        if new_value is not None:
            new_line = _splice(line, node.col_offset, node.end_col_offset, new_value)
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


@functools.lru_cache(maxsize=4096)
def _literal(text: str) -> object:
    """The value a literal's source text denotes (None if it is not one); memoised, as the same
    literals are checked for every child of a parent."""
    try:
        return ast.literal_eval(parse_python(text, "eval"))
    except (ValueError, SyntaxError):
        return None


# ---------------------------------------------------------------- comparisons


def comparison_edits(parsed: ParsedSource, rng: np.random.Generator) -> list[LineEdit]:
    fstring_spans = [
        _char_span(parsed.lines, n) for n in ast.walk(parsed.tree) if isinstance(n, ast.JoinedStr)
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
    if not all(_whole_line_simple(parsed, s) for s in (first, second)):
        return False
    row = first.lineno - 1
    return (
        second.lineno == first.lineno + 1
        and first.col_offset == second.col_offset
        and parsed.lines[row].strip() != parsed.lines[row + 1].strip()
        and parsed.editable(row, row + 1)
    )


def _whole_line_simple(parsed: ParsedSource, statement: ast.stmt) -> bool:
    """A one-line assignment or expression statement alone on its line (no ``;``)."""
    if not isinstance(statement, SIMPLE_STATEMENTS) or statement.end_lineno != statement.lineno:
        return False
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return False  # docstrings and bare literals
    line = parsed.lines[statement.lineno - 1]
    before = _byte_slice(line, 0, statement.col_offset)
    after = _byte_slice(line, statement.end_col_offset or 0, None).strip()
    return not before.strip() and (not after or after.startswith("#"))


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
            new_text = _byte_slice(line, operand.col_offset, operand.end_col_offset)
        else:
            new_text = f"not ({_byte_slice(line, test.col_offset, test.end_col_offset)})"
        new_line = _splice(line, test.col_offset, test.end_col_offset, new_text)
        edits.append(LineEdit(row, row + 1, (new_line,)))
    return edits


# -------------------------------------------------------------------- helpers


def _nodes_outside_fstrings(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node``, skipping f-strings (their positions are unreliable in 3.11)."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.JoinedStr):
            yield child
            yield from _nodes_outside_fstrings(child)


def _byte_slice(line: str, start: int, end: int | None) -> str:
    """Slice by UTF-8 byte offsets, which is what ``ast`` column offsets count."""
    return line.encode()[start:end].decode(errors="replace")


def _splice(line: str, start: int, end: int, text: str) -> str:
    raw = line.encode()
    return raw[:start].decode() + text + raw[end:].decode()


def _char_span(lines: list[str], node: ast.expr) -> tuple[tuple[int, int], tuple[int, int]]:
    """The node's start and end as tokenize writes them: 1-based rows, character columns."""
    end_row = node.end_lineno or node.lineno
    start_col = len(_byte_slice(lines[node.lineno - 1], 0, node.col_offset))
    end_col = len(_byte_slice(lines[end_row - 1], 0, node.end_col_offset))
    return (node.lineno, start_col), (end_row, end_col)
