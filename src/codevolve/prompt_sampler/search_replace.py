"""The SEARCH/REPLACE answer format: reading a proposer's answer and applying it to the parent.

Reading. Answers come from language models, so the reader is lenient about form and strict about
meaning. It accepts markdown fences around the blocks (or around the whole answer), prose before,
between and after blocks, CRLF line endings, markers of 5 to 9 characters and trailing spaces on
marker lines. It refuses to guess when markers are present but do not form a block: that is
MALFORMED, naming the block at fault. Without any marker, the longest fenced code block (or the
bare answer) that parses as a Python program is taken as a full rewrite.

Applying, confined to the EVOLVE-BLOCK (:mod:`codevolve.core.evolve_block`). Each hunk is applied
to the result of the one before. Its SEARCH text must occur exactly once: first as an exact
substring; failing that, as whole lines compared ignoring trailing whitespace and allowing one
uniform indentation shift (the REPLACE text is shifted the same way). The second step also picks
the one whole-line occurrence when the exact text occurs more than once only because it is also
part of a longer line. No match is NO_MATCH and more than one is AMBIGUOUS: a block is never
skipped silently. A matched span must lie inside one editable region of the parent, and the fixed
code around the regions (marker lines included) must come out unchanged, else
OUTSIDE_EVOLVE_BLOCK.

A full rewrite either carries the markers (the code outside them must equal the parent's, or be
the marker lines alone) or, when the parent has one region, is the new text of that region (an
answer may hold only the evolved function). The child's fixed code is always the parent's own text.

The values (:class:`~codevolve.core.diff.Hunk`, :class:`~codevolve.core.diff.ApplyFailure`, ...)
live in :mod:`codevolve.core.diff`; an answer that does not apply is one of them, never an
exception.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from enum import Enum

from codevolve.core.diff import (
    Applied,
    ApplyFailure,
    ApplyFailureKind,
    ApplyOutcome,
    Diff,
    Hunk,
    occurrence_starts,
)
from codevolve.core.evolve_block import Layout, is_marker, layout
from codevolve.core.pysource import check_parses, parse_python
from codevolve.prompt_sampler.errors import PromptSamplerError

__all__ = ["DEFAULT_MAX_CODE_LENGTH", "ParsedAnswer", "apply_answer", "is_program", "parse_answer"]

DEFAULT_MAX_CODE_LENGTH = 20_000  # characters

# --- reading --------------------------------------------------------------------------------------

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


# --- applying -----------------------------------------------------------------------------------


def apply_answer(
    parent: str, answer: str, *, max_code_length: int = DEFAULT_MAX_CODE_LENGTH
) -> ApplyOutcome:
    """The child program ``answer`` makes of ``parent``, or the typed reason there is none."""
    parsed = parse_answer(answer)
    if isinstance(parsed, ApplyFailure):
        return parsed
    if parsed.rewrite is not None:
        child = _apply_rewrite(parent, parsed.rewrite)
        diff_text = parsed.rewrite
    else:
        child = _apply_hunks(parent, parsed.hunks)
        diff_text = Diff(parsed.hunks).render()
    if isinstance(child, ApplyFailure):
        return child
    failure = _judge(parent, child, max_code_length=max_code_length)
    if failure is not None:
        return failure
    return Applied(source=child, diff_text=diff_text, full_rewrite=parsed.full_rewrite)


def _judge(parent: str, child: str, *, max_code_length: int) -> ApplyFailure | None:
    if child == parent:
        return ApplyFailure(ApplyFailureKind.NO_CHANGE, "the child is identical to the parent")
    try:
        check_parses(child)  # the proposer may have checked it already
    except SyntaxError as error:
        where = f"line {error.lineno}: " if error.lineno is not None else ""
        return ApplyFailure(ApplyFailureKind.SYNTAX_ERROR, f"{where}{error.msg}")
    except (ValueError, MemoryError, RecursionError) as error:  # null bytes; parser stack overflow
        return ApplyFailure(ApplyFailureKind.SYNTAX_ERROR, f"the child does not parse: {error!r}")
    if len(child) > max_code_length:
        return ApplyFailure(
            ApplyFailureKind.TOO_LONG,
            f"the child has {len(child)} characters, the limit is {max_code_length}",
        )
    return None


# --- hunks ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Match:
    start: int  # character offsets [start, end) of the matched text in the program
    end: int
    replacement: str


def _apply_hunks(parent: str, hunks: tuple[Hunk, ...]) -> str | ApplyFailure:
    guarded = layout(parent).marked  # an unmarked parent is editable as a whole
    text = parent
    for index, hunk in enumerate(hunks):
        found = _locate(text, hunk, index=index)
        if isinstance(found, ApplyFailure):
            return found
        before = layout(text)
        if guarded and not before.holds(found.start, found.end):
            return _outside(index, "the SEARCH text reaches outside the EVOLVE-BLOCK")
        child = text[: found.start] + found.replacement + text[found.end :]
        if guarded and not _same_fixed_code(before, child):
            return _outside(index, "the REPLACE text adds or breaks an EVOLVE-BLOCK marker line")
        text = child
    return text


def _same_fixed_code(before: Layout, child: str) -> bool:
    return layout(child).fixed_parts() == before.fixed_parts()


def _outside(index: int | None, message: str) -> ApplyFailure:
    prefix = "" if index is None else f"block {index + 1}: "
    return ApplyFailure(ApplyFailureKind.OUTSIDE_EVOLVE_BLOCK, prefix + message, index)


def _locate(text: str, hunk: Hunk, *, index: int) -> _Match | ApplyFailure:
    exact = occurrence_starts(text, hunk.search)
    if len(exact) == 1:
        return _Match(exact[0], exact[0] + len(hunk.search), hunk.replace)
    # Not exactly once: compare whole lines. This also settles "    return x" occurring both as
    # its own line and inside "        return x * 2": only the first is a whole-line match.
    tolerant = _tolerant_matches(text, hunk)
    if len(tolerant) == 1:
        return tolerant[0]
    if len(tolerant) > 1:
        return _ambiguous(index, f"matches {len(tolerant)} places when whitespace is ignored")
    if len(exact) > 1:
        return _ambiguous(index, f"occurs {len(exact)} times")
    first_line = next((line.strip() for line in hunk.search.split("\n") if line.strip()), "")
    return ApplyFailure(
        ApplyFailureKind.NO_MATCH,
        f"block {index + 1}: the SEARCH text (starting {first_line[:60]!r}) is not in the program",
        index,
    )


def _ambiguous(index: int, how: str) -> ApplyFailure:
    message = f"block {index + 1}: the SEARCH text {how}; add context lines to make it unique"
    return ApplyFailure(ApplyFailureKind.AMBIGUOUS, message, index)


def _tolerant_matches(text: str, hunk: Hunk) -> list[_Match]:
    """Windows of whole lines equal to the SEARCH lines but for trailing space and one indent."""
    lines = text.split("\n")
    starts = _line_starts(lines)
    wanted = hunk.search.split("\n")
    wanted_margin = _margin(wanted)
    wanted_body = [_body(line, wanted_margin) for line in wanted]
    wanted_stripped = [line.strip() for line in wanted]
    stripped = [line.strip() for line in lines]
    count = len(wanted)
    matches: list[_Match] = []
    for first in range(len(lines) - count + 1):
        if stripped[first : first + count] != wanted_stripped:
            continue  # cheap rejection before comparing indentation
        window = lines[first : first + count]
        margin = _margin(window)
        if [_body(line, margin) for line in window] != wanted_body:
            continue
        last = first + count - 1
        replacement = _reindent(hunk.replace, old_margin=wanted_margin, new_margin=margin)
        matches.append(_Match(starts[first], starts[last] + len(lines[last]), replacement))
    return matches


def _line_starts(lines: list[str]) -> list[int]:
    starts: list[int] = []
    offset = 0
    for line in lines:
        starts.append(offset)
        offset += len(line) + 1
    return starts


def _margin(lines: list[str]) -> str:
    """The leading whitespace every non-blank line shares."""
    indents = [line[: len(line) - len(line.lstrip())] for line in lines if line.strip()]
    if not indents:
        return ""
    # The common prefix of the lexicographic extremes is the common prefix of all of them.
    low, high = min(indents), max(indents)
    shared = next((i for i, (a, b) in enumerate(zip(low, high, strict=False)) if a != b), len(low))
    return low[:shared]


def _body(line: str, margin: str) -> str:
    """A line less the shared margin and its trailing whitespace; blank lines compare as empty."""
    return line.rstrip()[len(margin) :] if line.strip() else ""


def _reindent(text: str, *, old_margin: str, new_margin: str) -> str:
    """Move REPLACE lines from the SEARCH text's indentation to the program's."""
    shift = len(new_margin) - len(old_margin)  # characters
    moved: list[str] = []
    for line in text.split("\n"):
        if not line.strip():
            moved.append("")
        elif line.startswith(old_margin):
            moved.append(new_margin + line[len(old_margin) :])
        else:  # indented less than the SEARCH text: shift by the same number of columns
            body = line.lstrip()
            indent = len(line) - len(body)
            moved.append(" " * max(0, indent + shift) + body)
    return "\n".join(moved)


# --- full rewrites --------------------------------------------------------------------------------


def _apply_rewrite(parent: str, rewrite: str) -> str | ApplyFailure:
    parent_layout = layout(parent)
    if not parent_layout.marked:
        return rewrite
    contents = _region_contents(parent_layout, rewrite)
    if isinstance(contents, ApplyFailure):
        return contents
    return parent_layout.splice(contents)


def _region_contents(parent_layout: Layout, rewrite: str) -> tuple[str, ...] | ApplyFailure:
    """The new text of each of the parent's regions that a rewrite asks for."""
    regions = parent_layout.regions
    rewrite_layout = layout(rewrite)
    if rewrite_layout.marked:
        if len(rewrite_layout.regions) != len(regions):
            return _outside(
                None,
                f"the rewrite has {len(rewrite_layout.regions)} EVOLVE-BLOCK regions, "
                f"the program has {len(regions)}",
            )
        theirs = rewrite_layout.fixed_parts()
        ours = parent_layout.fixed_parts()
        if not (_same_code(theirs, ours) or all(_only_markers(part) for part in theirs)):
            return _outside(None, "the rewrite changes code outside the EVOLVE-BLOCK")
        return rewrite_layout.region_texts()
    if len(regions) != 1:
        return _outside(
            None, f"the rewrite has no EVOLVE-BLOCK markers and the program has {len(regions)}"
        )
    before, after = parent_layout.fixed_parts()
    return (_without_frame(rewrite, before=before, after=after),)


def _same_code(theirs: tuple[str, ...], ours: tuple[str, ...]) -> bool:
    """Equal but for trailing whitespace and blank lines at the ends of each part."""
    return [_code_lines(part) for part in theirs] == [_code_lines(part) for part in ours]


def _code_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _only_markers(part: str) -> bool:
    return all(is_marker(line) for line in part.split("\n") if line.strip())


def _without_frame(rewrite: str, *, before: str, after: str) -> str:
    """A marker-less rewrite less any copy of the fixed code around the region.

    An answer that repeats the whole program but drops the markers would otherwise put a second
    copy of the fixed code inside the block. ``before`` ends with the START marker line and
    ``after`` starts with the END marker line; those are not expected in the rewrite.
    """
    head = _code_lines("\n".join(_code_lines(before)[:-1]))
    tail = _code_lines("\n".join(_code_lines(after)[1:]))
    lines = _code_lines(rewrite)
    framed = False
    if head and lines[: len(head)] == head:
        lines, framed = lines[len(head) :], True
    if tail and len(lines) >= len(tail) and lines[len(lines) - len(tail) :] == tail:
        lines, framed = lines[: len(lines) - len(tail)], True
    if not framed:
        return rewrite if rewrite.endswith("\n") or not rewrite else rewrite + "\n"
    lines = _code_lines("\n".join(lines))
    return "\n".join(lines) + "\n" if lines else ""
