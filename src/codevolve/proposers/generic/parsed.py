"""A parent program as the generic mutations read it, and the line edits they propose.

A parent is parsed once (:func:`parse_source`) and shared by every finder and every proposal of it.
A finder returns :class:`LineEdit` candidates; :func:`first_applicable` renders the first one, in
random order, that lies in one EVOLVE-BLOCK region (:mod:`codevolve.core.evolve_block`, the layout
the applier judges by), makes a SEARCH/REPLACE hunk occurring exactly once in the parent
(:func:`codevolve.core.diff.unique_line_hunk`) and leaves a child that parses. Column offsets from
``ast`` count UTF-8 bytes: :func:`byte_slice` and :func:`splice` read and edit lines by them.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from codevolve.core.diff import Diff, Hunk, unique_line_hunk
from codevolve.core.evolve_block import Layout, layout
from codevolve.core.pysource import check_parses, parse_python

MAX_SITES_TRIED = 16  # sites tried per proposal before giving up
PARSED_PARENTS = 256  # parents whose parse is kept: most proposals draw one of a few elites
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
    layout: Layout
    nodes: tuple[ast.AST, ...]  # every node of the tree outside f-strings, in walk order

    def editable(self, first: int, last: int) -> bool:
        """Whether the lines ``[first, last]`` (0-based, both included) lie in one region."""
        return self.layout.region_of_lines(first, last) is not None


@functools.lru_cache(maxsize=PARSED_PARENTS)
def parse_source(source: str) -> ParsedSource | None:
    """The parent parsed once: the many children of one elite, and the mutations tried for one
    proposal, all read the same parse."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return None
    lines = source.split("\n")
    nodes = tuple(nodes_outside_fstrings(tree))
    return ParsedSource(source, lines, tree, layout(source), nodes)


def first_applicable(
    parsed: ParsedSource, edits: list[LineEdit], rng: np.random.Generator
) -> str | None:
    """Render the first edit, in random order, that makes a unique hunk and a parsable child."""
    for index in rng.permutation(len(edits))[:MAX_SITES_TRIED]:
        edit = edits[int(index)]
        region = parsed.layout.region_of_lines(edit.start, max(edit.start, edit.end - 1))
        if region is None:
            continue
        hunk = unique_line_hunk(
            parsed.source,
            start=edit.start,
            end=edit.end,
            new_lines=list(edit.new_lines),
            region=region.lines,
        )
        if hunk is not None and _child_parses(parsed.source, hunk):
            return Diff((hunk,)).render()
    return None


def _child_parses(source: str, hunk: Hunk) -> bool:
    """Whether the program the hunk makes of ``source`` parses."""
    try:
        check_parses(source.replace(hunk.search, hunk.replace, 1))
    except (SyntaxError, ValueError):  # ValueError: null bytes in the source
        return False
    return True


@functools.lru_cache(maxsize=4096)
def literal(text: str) -> object:
    """The value a literal's source text denotes (None if it is not one); memoised, as the same
    literals are checked for every child of a parent."""
    try:
        return ast.literal_eval(parse_python(text, "eval"))
    except (ValueError, SyntaxError):
        return None


def whole_line_simple(parsed: ParsedSource, statement: ast.stmt) -> bool:
    """A one-line assignment or expression statement alone on its line (no ``;``)."""
    if not isinstance(statement, SIMPLE_STATEMENTS) or statement.end_lineno != statement.lineno:
        return False
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return False  # docstrings and bare literals
    line = parsed.lines[statement.lineno - 1]
    before = byte_slice(line, 0, statement.col_offset)
    after = byte_slice(line, statement.end_col_offset or 0, None).strip()
    return not before.strip() and (not after or after.startswith("#"))


def nodes_outside_fstrings(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node``, skipping f-strings (their positions are unreliable in 3.11)."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.JoinedStr):
            yield child
            yield from nodes_outside_fstrings(child)


def byte_slice(line: str, start: int, end: int | None) -> str:
    """Slice by UTF-8 byte offsets, which is what ``ast`` column offsets count."""
    return line.encode()[start:end].decode(errors="replace")


def splice(line: str, start: int, end: int, text: str) -> str:
    raw = line.encode()
    return raw[:start].decode() + text + raw[end:].decode()


def char_span(lines: list[str], node: ast.expr) -> tuple[tuple[int, int], tuple[int, int]]:
    """The node's start and end as tokenize writes them: 1-based rows, character columns."""
    end_row = node.end_lineno or node.lineno
    start_col = len(byte_slice(lines[node.lineno - 1], 0, node.col_offset))
    end_col = len(byte_slice(lines[end_row - 1], 0, node.end_col_offset))
    return (node.lineno, start_col), (end_row, end_col)
