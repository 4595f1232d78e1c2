"""The EVOLVE-BLOCK layout of a program: which of its lines may change.

A program marks what may change with ``# EVOLVE-BLOCK-START`` and ``# EVOLVE-BLOCK-END`` lines
(several pairs are allowed). Everything else, the marker lines included, is fixed code: a child
must carry it unchanged. A program without any marker is editable as a whole.

One reading serves everyone: the applier in ``prompt_sampler`` judges edits by characters, the
generic mutations in ``proposers`` choose edits by lines, so a :class:`Region` carries both. A
proposer that reads the layout differently from the applier would emit edits bound to be refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

EVOLVE_START = "# EVOLVE-BLOCK-START"
EVOLVE_END = "# EVOLVE-BLOCK-END"

Span: TypeAlias = tuple[int, int]  # character offsets [start, end)


@dataclass(frozen=True, slots=True)
class Region:
    """One editable region, in characters and in lines of ``source.split("\\n")``.

    ``start`` is the first character of the line after a START marker and ``end`` the first
    character of its END marker line, so the newline ending the last editable line is inside.
    ``first_line`` and ``end_line`` are the same region as 0-based line indices ``[first, end)``.
    """

    start: int
    end: int
    first_line: int
    end_line: int

    @property
    def span(self) -> Span:
        return (self.start, self.end)

    @property
    def lines(self) -> tuple[int, int]:
        """Line indices ``[first, end)``, the form :func:`codevolve.core.diff.unique_line_hunk`
        takes."""
        return (self.first_line, self.end_line)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where ``source`` may change."""

    source: str
    marked: bool  # the source has at least one EVOLVE-BLOCK marker line
    regions: tuple[Region, ...]  # in order; the whole source when unmarked

    @property
    def spans(self) -> tuple[Span, ...]:
        return tuple(region.span for region in self.regions)

    def holds(self, start: int, end: int) -> bool:
        """Whether the characters ``[start, end)`` lie wholly inside one editable region."""
        return any(r.start <= start and end <= r.end for r in self.regions)

    def region_of_lines(self, first: int, last: int) -> Region | None:
        """The region holding the lines ``[first, last]`` (both included), if one does."""
        return next((r for r in self.regions if r.first_line <= first and last < r.end_line), None)

    def fixed_parts(self) -> tuple[str, ...]:
        """The text around the regions: one more part than there are regions."""
        parts: list[str] = []
        previous_end = 0
        for region in self.regions:
            parts.append(self.source[previous_end : region.start])
            previous_end = region.end
        parts.append(self.source[previous_end:])
        return tuple(parts)

    def region_texts(self) -> tuple[str, ...]:
        """The editable text of each region."""
        return tuple(self.source[r.start : r.end] for r in self.regions)

    def splice(self, contents: tuple[str, ...]) -> str:
        """The source with the text of each region replaced by the matching entry of
        ``contents``."""
        fixed = self.fixed_parts()
        pieces = [fixed[0]]
        for content, after in zip(contents, fixed[1:], strict=True):
            pieces.extend((content, after))
        return "".join(pieces)


def is_marker(line: str) -> bool:
    """Whether a line is an EVOLVE-BLOCK marker (indented markers and trailing notes allowed)."""
    stripped = line.strip()
    return stripped.startswith(EVOLVE_START) or stripped.startswith(EVOLVE_END)


def layout(source: str) -> Layout:
    """The editable regions of ``source``.

    A START without a matching END opens nothing, and a second START before an END restarts the
    region: a program with markers but no complete pair (an END alone included) has no editable
    region at all.
    """
    regions: list[Region] = []
    marked = False
    open_at: tuple[int, int] | None = None  # (character, line) where the open region starts
    offset = 0
    lines = source.split("\n")
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(EVOLVE_START):
            marked = True
            open_at = (offset + len(line) + 1, index + 1)
        elif stripped.startswith(EVOLVE_END):
            marked = True
            if open_at is not None:
                regions.append(Region(open_at[0], offset, open_at[1], index))
                open_at = None
        offset += len(line) + 1
    if not marked:
        return Layout(source, marked=False, regions=(Region(0, len(source), 0, len(lines)),))
    return Layout(source, marked=True, regions=tuple(regions))
