"""A problem as a plug-in: the one frozen descriptor a problem's package exports.

A problem lives in one package (a folder) whose ``__init__.py`` binds ``PLUGIN``, a
:class:`ProblemPlugin`, and one entry point of the group :data:`ENTRY_POINTS` names it: in
``pyproject.toml`` for the problems that ship, in its own distribution for a problem of another
package::

    [project.entry-points."codevolve.problems"]
    my-problem = "my_problem:PLUGIN"

The registry (``codevolve.problems.registry``) reads the entry points. Services and workers reach
a problem only through its descriptor, never by importing its package (an import-linter
contract). Every part past the name is optional, and importing a descriptor does no work: the
problem is built by its factory when asked, device jobs are dotted paths that only a device
process imports, and the per-case report, the exporters, the problem-file reader and the
results page import what they need when called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from codevolve.core.export import Exporter
from codevolve.core.problem import Candidate, JSONValue, Problem
from codevolve.core.problem_file import ProblemFile
from codevolve.core.results import ResultsPage

ENTRY_POINTS = "codevolve.problems"  # the entry-point group of problem plug-ins
PLUGIN_ATTRIBUTE = "PLUGIN"  # what a problem package binds (the entry point names it)
BUNDLE_PREFIX = "bundle:"  # a job's problem name for an uploaded bundle: bundle:<sha256>


@dataclass(frozen=True, slots=True)
class DeviceJob:
    """A trusted job that a device process runs for a problem's device stages
    (``device.run(name, payload)``; core/device.py)."""

    name: str  # e.g. "gemm.measure"; unique over every installed plug-in
    target: str  # "package.module:function", imported in the device process only, on first use
    cpu: bool = False  # also served by a device process that sees no GPU (``--gpus cpu``)

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def function(self) -> str:
        return self.target.partition(":")[2]


@dataclass(frozen=True, slots=True)
class CaseReport:
    """Per-case figures of one program beside its cascade's verdict: ``codevolve evaluate
    --shapes FILE`` (gemm-tiling's table of shapes).

    ``parse`` turns the JSON of the file into cases, raising a ``ProblemError`` (problems/
    errors.py) that names what is wrong; ``report`` runs the candidate on them (None: the
    problem's own cases) and returns the figures, merged into evaluate's record; ``lines`` is
    that record's summary for people, a few lines.
    """

    parse: Callable[[JSONValue], Sequence[Any]]
    report: Callable[[Candidate, Sequence[Any] | None], Mapping[str, Any]]
    lines: Callable[[Mapping[str, Any]], Sequence[str]]
    expects: str  # what the file holds, as error messages say it: "a list of [M, N, K]"
    example: str  # a valid file's text: "[[16, 4096, 4096]]"


@dataclass(frozen=True, slots=True)
class ProblemPlugin:
    """Everything the rest of codevolve knows of one problem.

    A plug-in without a ``problem`` is a format: its problems are built from files a user brings
    (uploaded bundles, ``bundle:<sha256>``), not named in ``codevolve run NAME``; its exporters
    and device jobs serve those jobs (KernelBench files), and its ``problem_file`` reads such a
    file for ``codevolve run`` (core/problem_file.py). ``results`` is a page of one row per job
    of the problem, in the dashboard and the API (core/results.py).
    """

    name: str  # what users type (``codevolve run NAME``); the entry point's name
    problem: Callable[[], Problem] | None = None  # builds the problem; called once per process
    label: str = ""  # how messages name its jobs when not by name (``KernelBench``)
    device_jobs: tuple[DeviceJob, ...] = ()
    exporters: tuple[Exporter, ...] = ()  # ``codevolve export --format``; the first is the default
    case_report: CaseReport | None = None
    problem_file: ProblemFile | None = None
    results: ResultsPage | None = None

    @property
    def shown(self) -> str:
        return self.label or self.name

    @property
    def is_format(self) -> bool:
        return self.problem is None
