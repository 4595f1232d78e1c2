"""SEARCH/REPLACE edits as values, and their canonical text form.

The canonical block is the one every proposer emits and every parser accepts::

    <<<<<<< SEARCH
    old lines
    =======
    new lines
    >>>>>>> REPLACE

These are the values; the text format is read and applied by
:mod:`codevolve.prompt_sampler.search_replace`. Rendering and :func:`unique_line_hunk` live here
(pure text) so that proposers and problems can emit diffs without depending on the parser, and the
EVOLVE-BLOCK layout they keep to is :mod:`codevolve.core.evolve_block`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

SEARCH_MARKER = "<<<<<<< SEARCH"
DIVIDER_MARKER = "======="
REPLACE_MARKER = ">>>>>>> REPLACE"


@dataclass(frozen=True, slots=True)
class Hunk:
    """Replace the exact text ``search`` (one occurrence) by ``replace``."""

    search: str
    replace: str

    def render(self) -> str:
        return "\n".join(
            [
                SEARCH_MARKER,
                self.search.rstrip("\n"),
                DIVIDER_MARKER,
                self.replace.rstrip("\n"),
                REPLACE_MARKER,
            ]
        )


@dataclass(frozen=True, slots=True)
class Diff:
    """An ordered list of hunks, applied one after the other."""

    hunks: tuple[Hunk, ...]

    def render(self) -> str:
        return "\n\n".join(h.render() for h in self.hunks) + "\n"


class ApplyFailureKind(StrEnum):
    """Why an answer could not be turned into a child program."""

    EMPTY = "empty"  # no blocks and no full rewrite in the answer
    MALFORMED = "malformed"  # markers present but not a well-formed block
    NO_MATCH = "no_match"  # a SEARCH text occurs nowhere in the parent
    AMBIGUOUS = "ambiguous"  # a SEARCH text occurs more than once
    OUTSIDE_EVOLVE_BLOCK = "outside_evolve_block"  # the edit touches fixed code
    NO_CHANGE = "no_change"  # the child equals the parent
    SYNTAX_ERROR = "syntax_error"  # the child does not parse
    TOO_LONG = "too_long"  # the child exceeds the configured code length


@dataclass(frozen=True, slots=True)
class ApplyFailure:
    """A typed failure to apply an answer; ``hunk_index`` names the block at fault, if any."""

    kind: ApplyFailureKind
    message: str
    hunk_index: int | None = None


@dataclass(frozen=True, slots=True)
class Applied:
    """A successfully applied answer: the child's source and the diff that made it."""

    source: str
    diff_text: str
    full_rewrite: bool


ApplyOutcome = Applied | ApplyFailure


def occurrence_starts(text: str, needle: str) -> list[int]:
    """Where ``needle`` starts in ``text``, overlapping occurrences included."""
    starts: list[int] = []
    at = text.find(needle)
    while at != -1:
        starts.append(at)
        at = text.find(needle, at + 1)
    return starts


def occurrences(text: str, needle: str) -> int:
    """How often ``needle`` occurs in ``text``, overlapping occurrences included."""
    return len(occurrence_starts(text, needle))


def unique_line_hunk(
    source: str, *, start: int, end: int, new_lines: list[str], region: tuple[int, int]
) -> Hunk | None:
    """Replace lines ``[start, end)`` of ``source`` by ``new_lines`` as a hunk unique in it.

    Context lines inside ``region`` (line indices ``[first, stop)``, as
    :attr:`codevolve.core.evolve_block.Region.lines` gives them) are added, after first and
    then alternately, until the SEARCH text occurs once, neither side is empty and no side starts
    or ends with a blank line (appliers may trim those). None when the region runs out first.
    Mutations of every proposer build their hunks here, so all emit the same canonical form.
    """
    lines = source.split("\n")
    first, stop = region
    low, high = start, end
    prefer_after = True
    while True:
        search_lines = lines[low:high]
        hunk = Hunk(
            search="\n".join(search_lines),
            replace="\n".join([*lines[low:start], *new_lines, *lines[end:high]]),
        )
        if (
            search_lines
            and hunk.replace.strip()
            and hunk.search != hunk.replace
            and search_lines[0].strip()
            and search_lines[-1].strip()
            and occurrences(source, hunk.search) == 1
        ):
            return hunk
        can_after, can_before = high < stop, low > first
        if not (can_after or can_before):
            return None
        if can_after and (prefer_after or not can_before):
            high += 1
        else:
            low -= 1
        prefer_after = not prefer_after
