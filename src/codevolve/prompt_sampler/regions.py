"""The editable regions of a program: the lines between EVOLVE-BLOCK markers.

A program marks what may change with ``# EVOLVE-BLOCK-START`` and ``# EVOLVE-BLOCK-END`` lines
(several pairs are allowed). Everything else, the marker lines included, is fixed code: a child
must carry it unchanged. A program without any marker is editable as a whole.

Spans are character offsets ``[start, end)`` into the source: ``start`` is the first character of
the line after a START marker, ``end`` the first character of its END marker line, so the newline
that ends the last editable line is inside the region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from codevolve.core.diff import EVOLVE_END, EVOLVE_START

Span: TypeAlias = tuple[int, int]  # character offsets [start, end)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a program may change."""

    marked: bool  # the source has at least one EVOLVE-BLOCK marker line
    regions: tuple[Span, ...]  # editable spans, in order; the whole source when unmarked

    def holds(self, start: int, end: int) -> bool:
        """Whether the characters ``[start, end)`` lie wholly inside one editable region."""
        return any(low <= start and end <= high for low, high in self.regions)


def is_marker(line: str) -> bool:
    """Whether a line is an EVOLVE-BLOCK marker (indented markers and trailing notes allowed)."""
    stripped = line.strip()
    return stripped.startswith(EVOLVE_START) or stripped.startswith(EVOLVE_END)


def layout(source: str) -> Layout:
    """The editable regions of ``source``.

    A START without a matching END opens nothing, and a second START before an END restarts the
    region: a program with markers but no complete pair has no editable region at all.
    """
    regions: list[Span] = []
    marked = False
    open_at: int | None = None
    offset = 0
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped.startswith(EVOLVE_START):
            marked = True
            open_at = offset + len(line) + 1
        elif stripped.startswith(EVOLVE_END):
            marked = True
            if open_at is not None:
                regions.append((open_at, offset))
                open_at = None
        offset += len(line) + 1
    if not marked:
        return Layout(marked=False, regions=((0, len(source)),))
    return Layout(marked=True, regions=tuple(regions))


def evolve_regions(source: str) -> list[Span]:
    """The editable character spans of ``source``; ``[(0, len(source))]`` when it has no markers."""
    return list(layout(source).regions)


def fixed_parts(source: str, regions: tuple[Span, ...]) -> tuple[str, ...]:
    """The text around the regions: one more part than there are regions."""
    parts: list[str] = []
    previous_end = 0
    for start, end in regions:
        parts.append(source[previous_end:start])
        previous_end = end
    parts.append(source[previous_end:])
    return tuple(parts)


def region_texts(source: str, regions: tuple[Span, ...]) -> tuple[str, ...]:
    """The editable text of each region."""
    return tuple(source[start:end] for start, end in regions)


def splice(source: str, regions: tuple[Span, ...], contents: tuple[str, ...]) -> str:
    """``source`` with the text of each region replaced by the matching entry of ``contents``."""
    fixed = fixed_parts(source, regions)
    pieces = [fixed[0]]
    for content, after in zip(contents, fixed[1:], strict=True):
        pieces.extend((content, after))
    return "".join(pieces)
