"""Line edits of a parent program rendered as SEARCH/REPLACE hunks that apply exactly once.

A hunk's SEARCH text must occur exactly once in the parent, or the applier rejects it as ambiguous.
:func:`line_hunk` starts from the lines being changed and widens the context line by line, never
past the editable region, until the text is unique.
"""

from __future__ import annotations

from dataclasses import dataclass

from codevolve.core.diff import EVOLVE_END, EVOLVE_START, Hunk, unique_line_hunk
from codevolve.core.pysource import check_parses


@dataclass(frozen=True, slots=True)
class Region:
    """Editable lines ``[start, end)`` of a program (0-based line indices)."""

    start: int
    end: int

    def holds(self, first: int, last: int) -> bool:
        """Whether the lines ``[first, last]`` lie wholly inside the region."""
        return self.start <= first and last < self.end


def editable_regions(lines: list[str]) -> tuple[Region, ...]:
    """The lines strictly between each EVOLVE-BLOCK-START and its END; the whole file without."""
    regions: list[Region] = []
    start: int | None = None
    for index, line in enumerate(lines):
        marker = line.strip()
        if marker.startswith(EVOLVE_START):
            start = index + 1
        elif marker.startswith(EVOLVE_END) and start is not None:
            regions.append(Region(start, index))
            start = None
    if regions or any(line.strip().startswith(EVOLVE_START) for line in lines):
        return tuple(regions)
    return (Region(0, len(lines)),)


def region_of(regions: tuple[Region, ...], first: int, last: int) -> Region | None:
    """The region holding lines ``[first, last]``, if one does."""
    return next((r for r in regions if r.holds(first, last)), None)


def line_hunk(
    source: str, region: Region, *, start: int, end: int, new_lines: list[str]
) -> Hunk | None:
    """Replace lines ``[start, end)`` by ``new_lines`` as a hunk unique in ``source``, widened
    by context lines inside ``region`` (see :func:`codevolve.core.diff.unique_line_hunk`)."""
    return unique_line_hunk(
        source, start=start, end=end, new_lines=new_lines, region=(region.start, region.end)
    )


def child_of(source: str, hunk: Hunk) -> str | None:
    """The program the hunk makes of ``source``, or None when that child would not parse."""
    child = source.replace(hunk.search, hunk.replace, 1)
    return child if parses(child) else None


def parses(source: str) -> bool:
    try:
        check_parses(source)
    except (SyntaxError, ValueError):  # ValueError: null bytes in the source
        return False
    return True
