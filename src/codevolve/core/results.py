"""A problem's results page: one row per job of the problem, figures over the rows.

A plug-in may describe one (core/plugin.py: ``ResultsPage``): the dashboard shows it at
``/<segment>`` (live from ``/live/<segment>.json``) and the API answers it at
``/api/v1/<segment>``, both from the same rows. The plug-in gives a function that builds a job's
row from the job's records (:class:`JobResults`, read for it by the services: problems hold no
database code), a function that sums rows up, and a description of the table that the dashboard
draws; the services hold no page of their own for any problem.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from codevolve.core.job import Job
from codevolve.core.problem import JSONValue
from codevolve.core.program import Program

Row = Mapping[str, Any]  # one job's row: field -> a JSON value (core/problem.py: JSONValue)
Summary = Mapping[str, JSONValue]  # the page's figures over its rows


class JobResults(Protocol):
    """What a row builder may read of its job."""

    @property
    def job(self) -> Job: ...

    async def bundle_files(self) -> Mapping[str, bytes] | None:
        """The stored files of a job whose problem is a bundle (``bundle:<sha256>``), else None."""
        ...

    async def best_program(self) -> Program | None:
        """The job's best program (its score is the job's ``best_score``); None without one."""
        ...

    async def proposals(self) -> int:
        """Proposals the job has made so far, whatever their outcome."""
        ...


# A job's row, or None for a job the page does not list (a bundle of another format). A
# ConfigError says the job's records cannot be read (an upload's broken settings): the job is
# left out of the page rather than failing it.
RowFunction = Callable[[JobResults], Awaitable[Row | None]]
# (rows, cases without a row, counted as failures: files a set could not search) -> figures
SummaryFunction = Callable[[Sequence[Row], int], Summary]

ColumnKind = Literal["text", "yes_no", "times", "number", "tag", "state", "job"]


@dataclass(frozen=True, slots=True)
class Column:
    """One column of the page's table.

    ``kind`` says how a value is drawn: ``text`` as it is; ``yes_no`` a boolean as yes/no;
    ``times`` a ratio as ``2.50×``; ``number`` with ``digits`` decimals; ``tag`` a boolean as a
    tag reading ``title`` in lower case; ``state`` a job state's badge; ``job`` a job id linking
    to its page. ``flag`` names a boolean field: where it is true, ``note`` follows the value.
    Null values are drawn as a dash.
    """

    field: str
    title: str
    kind: ColumnKind = "text"
    digits: int = 2
    flag: str = ""
    note: str = ""


@dataclass(frozen=True, slots=True)
class Grid:
    """A figure of the summary drawn as a small table: one line per summary field that holds a
    mapping, one column per key of those mappings (KernelBench: fast_p against each baseline,
    one column per p)."""

    title: str
    note: str  # what the figure is, beside the title
    corner: str  # the first column's header ("Against")
    lines: tuple[tuple[str, str], ...]  # (summary field, label): ("fast_p_eager", "PyTorch eager")
    columns: tuple[tuple[str, str], ...]  # (key, header): ("1.0", "fast_1")


@dataclass(frozen=True, slots=True)
class ResultsPage:
    """A problem's results page: rows, figures, and how the dashboard draws them."""

    segment: str  # the pages' URL segment: /<segment>, /api/v1/<segment>, /live/<segment>.json
    title: str  # the page's heading and its link in the dashboard's navigation
    subtitle: str  # beside the heading: what a row shows
    key: str  # the row field naming what a row stands for: one row per owner and key (newest)
    row: RowFunction
    summary: SummaryFunction
    columns: tuple[Column, ...]
    grid: Grid | None = None
    # A line of the summary's counts: ``{field}`` is replaced by the summary's value, and
    # ``{field|s}`` by "s" unless that value is 1 ("{problems} problem{problems|s}").
    counts: str = ""
    empty: str = "No job yet."  # the table's text without rows; `text in backticks` is code
    hidden: tuple[str, ...] = ()  # row fields kept from the API and the page (a best's source)
    description: str = ""  # the API's documentation of the answer

    def public(self, row: Row) -> dict[str, Any]:
        """The row as the API and the dashboard show it."""
        return {field: value for field, value in row.items() if field not in self.hidden}
