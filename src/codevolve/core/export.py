"""Exports: a job's result as a file a user keeps (``codevolve export JOB --format F``).

A problem's plug-in names its exporters (core/plugin.py). An exporter is a function of the job's
records, read for it by the command line (:class:`ExportRecords`), and of the file name it will
be saved as; it returns the text, and for a data format its JSON form too. It never reaches the
database itself: problems hold no database code.
"""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from codevolve.core.errors import ConfigError
from codevolve.core.job import Job
from codevolve.core.problem import JSONValue
from codevolve.core.program import Program
from codevolve.core.pysource import parse_python


class ExportRefused(ConfigError):
    """The job cannot be exported in the format asked for: a job of another problem, no best
    program yet, or a program the format cannot hold; the message names the job and the way on.
    The command line prints it as one ``error:`` line and exits 2 (nothing was written)."""


class NotExported(ExportRefused):
    """Raised by an exporter of a format plug-in for a job whose files are not of its format;
    the command line names the formats that would export it."""


@dataclass(frozen=True, slots=True)
class BestProgram:
    """A job's best program with the figure its job reports for it."""

    job: Job
    program: Program
    score: float  # the job's best score: confirmed on independent samples

    @property
    def device(self) -> str:
        """The device the program was measured on, as its evaluation recorded it."""
        return self.program.artifacts.get("device_name") or "not recorded"

    @property
    def where(self) -> str:
        """The program as a refusal names it."""
        return f"job {self.job.id}'s best program {self.program.id}"

    def tree(self) -> ast.Module:
        """The program's source parsed; ExportRefused when it does not parse."""
        try:
            return parse_python(self.program.source)
        except (SyntaxError, ValueError) as exc:
            raise ExportRefused(f"{self.where} does not parse: {exc}") from exc


class ExportRecords(Protocol):
    """What an exporter may read of its job."""

    @property
    def job(self) -> Job: ...

    async def best(self) -> BestProgram:
        """The confirmed best; ExportRefused when the job has none yet."""
        ...

    def programs(self) -> AsyncIterator[Program]:
        """Every program of the job in proposal order, read a page at a time."""
        ...

    async def bundle_files(self) -> Mapping[str, bytes] | None:
        """The stored files of a job whose problem is a bundle (``bundle:<sha256>``), else None."""
        ...


@dataclass(frozen=True, slots=True)
class Exported:
    text: str  # what is printed, or written with --out (a module, or text for people)
    document: JSONValue = None  # the JSON form of a data format (--json; --out writes it)


# (the job's records, the file name it is saved as) -> the export; raises ExportRefused
ExportFunction = Callable[[ExportRecords, str], Awaitable[Exported]]


@dataclass(frozen=True, slots=True)
class Exporter:
    """One ``--format`` of ``codevolve export``."""

    format: str  # e.g. "module"
    export: ExportFunction
    default_file: str = ""  # a module's file name without --out ("gemm_config.py"); "" for data
    json: bool = False  # the format has a JSON form (``Exported.document``)

    @property
    def is_module(self) -> bool:
        """A Python module a user checks with pytest, rather than data."""
        return bool(self.default_file)
