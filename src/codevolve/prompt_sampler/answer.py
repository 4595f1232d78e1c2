"""Reading a proposer's answer: SEARCH/REPLACE blocks, or else a full rewrite.

Answers come from language models, so the reader is lenient about form and strict about meaning.
It accepts markdown fences around the blocks (or around the whole answer), prose before, between
and after blocks, CRLF line endings, markers of 5 to 9 characters and trailing spaces on marker
lines. It refuses to guess when markers are present but do not form a block: that is MALFORMED,
naming the block at fault. Without any marker, the longest fenced code block (or the bare answer)
that parses as a Python program is taken as a full rewrite.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from enum import Enum

from codevolve.core.diff import ApplyFailure, ApplyFailureKind, Hunk
from codevolve.core.pysource import parse_python
from codevolve.prompt_sampler.errors import PromptSamplerError

_SEARCH_LINE = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$", re.IGNORECASE)
_DIVIDER_LINE = re.compile(r"^\s*={5,9}\s*$")
_REPLACE_LINE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$", re.IGNORECASE)
_FENCE_OPEN = re.compile(r"^\s*`{3,}\s*[\w.+-]*\s*$")
_FENCE_CLOSE = re.compile(r"^\s*`{3,}\s*$")


@dataclass(frozen=True, slots=True)
class ParsedAnswer:
    """What an answer asks for: hunks applied in order, or a full rewrite (never both)."""

    hunks: tuple[Hunk, ...] = ()
    rewrite: str | None = None  # a whole program, or only the text of the EVOLVE block

    def __post_init__(self) -> None:
        if self.hunks and self.rewrite is not None:
            raise PromptSamplerError("an answer holds hunks or a full rewrite, not both")

    @property
    def full_rewrite(self) -> bool:
        return self.rewrite is not None


class _Marker(Enum):
    SEARCH = "<<<<<<< SEARCH"
    DIVIDER = "======="
    REPLACE = ">>>>>>> REPLACE"


class _Section(Enum):
    OUTSIDE = "outside"  # prose, fences, anything between blocks
    SEARCH = "search"
    REPLACE = "replace"


def parse_answer(text: str) -> ParsedAnswer | ApplyFailure:
    """The hunks or the full rewrite an answer holds, or why it holds neither."""
    if not text.strip():
        return ApplyFailure(ApplyFailureKind.EMPTY, "the answer is empty")
    lines = normalise_newlines(text).split("\n")
    markers = [_marker_of(line) for line in lines]
    # A lone divider is common in prose (a markdown heading underline); SEARCH and REPLACE are not.
    if _Marker.SEARCH in markers or _Marker.REPLACE in markers:
        return _parse_blocks(lines, markers)
    rewrite = _find_rewrite(lines)
    if rewrite is None:
        return ApplyFailure(
            ApplyFailureKind.EMPTY,
            "the answer holds no SEARCH/REPLACE block and no Python program",
        )
    return ParsedAnswer(rewrite=rewrite)


def normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _marker_of(line: str) -> _Marker | None:
    if _SEARCH_LINE.match(line):
        return _Marker.SEARCH
    if _DIVIDER_LINE.match(line):
        return _Marker.DIVIDER
    if _REPLACE_LINE.match(line):
        return _Marker.REPLACE
    return None


def _parse_blocks(lines: list[str], markers: list[_Marker | None]) -> ParsedAnswer | ApplyFailure:
    hunks: list[Hunk] = []
    section = _Section.OUTSIDE
    search: list[str] = []
    replace: list[str] = []
    for number, (line, marker) in enumerate(zip(lines, markers, strict=True), start=1):
        block = len(hunks)  # index of the block being read
        if section is _Section.OUTSIDE:
            if marker is _Marker.SEARCH:
                section, search = _Section.SEARCH, []
            elif marker is _Marker.REPLACE:
                return _malformed(
                    block, f"line {number}: a REPLACE marker with no SEARCH before it"
                )
        elif section is _Section.SEARCH:
            if marker is None:
                search.append(line)
            elif marker is _Marker.DIVIDER:
                section, replace = _Section.REPLACE, []
            else:
                return _malformed(block, f"line {number}: {marker.value} before the divider")
        elif marker is None:
            replace.append(line)
        elif marker is _Marker.REPLACE:
            hunk = _hunk(search, replace)
            if hunk is None:
                return _malformed(block, f"line {number}: the SEARCH section is empty")
            hunks.append(hunk)
            section = _Section.OUTSIDE
        else:
            return _malformed(block, f"line {number}: {marker.value} inside the REPLACE section")
    if section is not _Section.OUTSIDE:
        return _malformed(len(hunks), "the last block is not closed by a REPLACE marker")
    return ParsedAnswer(hunks=tuple(hunks))


def _malformed(block: int, message: str) -> ApplyFailure:
    return ApplyFailure(ApplyFailureKind.MALFORMED, f"block {block + 1}: {message}", block)


def _hunk(search: list[str], replace: list[str]) -> Hunk | None:
    search_text = "\n".join(_unfenced(search))
    if not search_text.strip():
        return None  # an empty SEARCH matches everywhere: never a meaningful edit
    return Hunk(search=search_text, replace="\n".join(_unfenced(replace)))


def _unfenced(section: list[str]) -> list[str]:
    """A section less a markdown fence written inside the block, at its first or last line.

    No Python line starts with three backticks outside a string, so this never eats code.
    """
    lines = list(section)
    if lines and _FENCE_OPEN.match(lines[0]):
        lines = lines[1:]
    if lines and _FENCE_CLOSE.match(lines[-1]):
        lines = lines[:-1]
    return lines


def _find_rewrite(lines: list[str]) -> str | None:
    """The longest fenced program in the answer (the last of equals), else the bare answer."""
    best: str | None = None
    for block in _fenced_blocks(lines):
        if is_program(block) and (best is None or len(block) >= len(best)):
            best = block
    if best is not None:
        return best
    bare = _trimmed("\n".join(lines))
    return bare if is_program(bare) else None


def _fenced_blocks(lines: list[str]) -> list[str]:
    """The text of every fenced block; an unclosed fence (a truncated answer) runs to the end."""
    blocks: list[str] = []
    inside: list[str] | None = None
    for line in lines:
        if inside is None:
            if _FENCE_OPEN.match(line):
                inside = []
        elif _FENCE_CLOSE.match(line):
            blocks.append(_trimmed("\n".join(inside)))
            inside = None
        else:
            inside.append(line)
    if inside is not None:
        blocks.append(_trimmed("\n".join(inside)))
    return blocks


def _trimmed(code: str) -> str:
    """Code without blank lines at either end, ending in one newline (empty stays empty)."""
    lines = code.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + "\n" if lines else ""


def is_program(code: str) -> bool:
    """Whether ``code`` parses and does something: a lone expression (a word of prose) does not."""
    try:
        module = parse_python(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return any(not isinstance(statement, ast.Expr) for statement in module.body)
