"""Problem plug-ins by name: the entry points of the group ``codevolve.problems``.

Each entry point names a problem package's ``PLUGIN`` (core/plugin.py): the problems that ship
are declared in ``pyproject.toml``, and a problem of another package declares its own in its
distribution, so installing it is all it takes. The entry points come from the installed
metadata: after ``pyproject.toml`` gains a problem, ``make install`` (``pip install -e .``)
records it. Importing this module does no work; the plug-ins are read once per process, on
first use, and a problem is built only when asked for.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from importlib import metadata
from types import MappingProxyType

from codevolve.core.errors import UnknownProblemError
from codevolve.core.export import Exporter
from codevolve.core.plugin import (
    BUNDLE_PREFIX,
    ENTRY_POINTS,
    PLUGIN_ATTRIBUTE,
    DeviceJob,
    ProblemPlugin,
)
from codevolve.core.problem import Problem
from codevolve.core.problem_file import ProblemFile
from codevolve.core.results import ResultsPage
from codevolve.problems.errors import PluginError

_SEGMENT = re.compile(r"^[a-z][a-z0-9-]*$")  # a results page's URL segment


@functools.cache
def plugins() -> Mapping[str, ProblemPlugin]:
    """Every installed plug-in by name; PluginError names one that cannot be used."""
    found: dict[str, ProblemPlugin] = {}
    for entry in sorted(metadata.entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        plugin = load_plugin(entry)
        if plugin.name in found:
            raise PluginError(f"problem plug-in {plugin.name!r} is installed twice ({entry.value})")
        found[plugin.name] = plugin
    if not found:
        raise PluginError(
            f"no problem plug-in is installed (entry points {ENTRY_POINTS!r}): install codevolve "
            "with `make install` (pip install -e .) so that its problems are recorded"
        )
    check_device_jobs(found.values())
    check_claims(found.values())
    return MappingProxyType(found)


def load_plugin(entry: metadata.EntryPoint) -> ProblemPlugin:
    """The plug-in an entry point names; PluginError says in one line why it cannot be used."""
    where = f"entry point {entry.name} = {entry.value}"
    try:
        loaded = entry.load()
    except (ImportError, AttributeError, SyntaxError) as exc:  # a broken or missing module
        raise PluginError(
            f"problem plug-in {entry.name!r} cannot be loaded ({where}): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(loaded, ProblemPlugin):
        raise PluginError(
            f"problem plug-in {entry.name!r} ({where}) is a {type(loaded).__name__}, not a "
            f"ProblemPlugin; a problem package binds {PLUGIN_ATTRIBUTE} = ProblemPlugin(...)"
        )
    if loaded.name != entry.name:
        raise PluginError(
            f"problem plug-in {entry.name!r} ({where}) is named {loaded.name!r}; the entry "
            "point's name must be the plug-in's"
        )
    return loaded


def check_device_jobs(found: Iterable[ProblemPlugin]) -> None:
    """PluginError for a device job two plug-ins declare, or one not named by a dotted path."""
    owners: dict[str, str] = {}
    for plugin in found:
        for job in plugin.device_jobs:
            if job.name in owners:
                raise PluginError(
                    f"device job {job.name!r} is declared by the problem plug-ins "
                    f"{owners[job.name]!r} and {plugin.name!r}"
                )
            if not job.module or not job.function:
                raise PluginError(
                    f"device job {job.name!r} of {plugin.name!r}: the target {job.target!r} is "
                    "not 'package.module:function'"
                )
            owners[job.name] = plugin.name


def check_claims(found: Iterable[ProblemPlugin]) -> None:
    """PluginError for a problem-file option or a results page two plug-ins claim, or a page's
    URL segment that is not a lower-case word (``results``, ``my-problem``)."""
    owners: dict[str, str] = {}
    for plugin in found:
        claims = []
        if plugin.problem_file is not None:
            file = plugin.problem_file
            claims += [
                f"the option {file.option}",
                *(f"the option {s.option}" for s in file.options),
            ]
        if plugin.results is not None:
            segment = plugin.results.segment
            if not _SEGMENT.match(segment):
                raise PluginError(
                    f"results page of {plugin.name!r}: the segment {segment!r} is not a "
                    "lower-case word (letters, digits, '-')"
                )
            claims.append(f"the results page /{segment}")
        for claim in claims:
            if owners.get(claim, plugin.name) != plugin.name:
                raise PluginError(
                    f"{claim} is claimed by the problem plug-ins {owners[claim]!r} and "
                    f"{plugin.name!r}"
                )
            owners[claim] = plugin.name


def problem_names() -> list[str]:
    """Names of the problems users can run, sorted (formats left out)."""
    return sorted(name for name, plugin in plugins().items() if not plugin.is_format)


def get_plugin(name: str) -> ProblemPlugin:
    """The plug-in of a problem users can run; UnknownProblemError lists the known names."""
    plugin = plugins().get(name)
    if plugin is None or plugin.is_format:
        known = ", ".join(problem_names())
        raise UnknownProblemError(f"unknown problem {name!r}; known problems: {known}")
    return plugin


def get_problem(name: str) -> Problem:
    """A fresh instance of the named problem; raises UnknownProblemError listing the known names."""
    factory = get_plugin(name).problem
    assert factory is not None  # get_plugin returns no format
    return factory()


def serving(problem: str) -> tuple[ProblemPlugin, ...]:
    """The plug-ins that serve a job of ``problem``: its own, or for an uploaded bundle
    (``bundle:<sha256>``) the formats; empty for a name no plug-in serves."""
    if problem.startswith(BUNDLE_PREFIX):
        return tuple(p for p in plugins().values() if p.is_format)
    plugin = plugins().get(problem)
    return () if plugin is None or plugin.is_format else (plugin,)


def device_jobs() -> dict[str, DeviceJob]:
    """Every plug-in's device jobs by name: the table a device process serves."""
    return {job.name: job for plugin in plugins().values() for job in plugin.device_jobs}


def exporters() -> list[tuple[ProblemPlugin, Exporter]]:
    """Every plug-in's exporters, plug-ins by name."""
    return [(plugin, exporter) for plugin in plugins().values() for exporter in plugin.exporters]


def problem_files() -> list[tuple[ProblemPlugin, ProblemFile]]:
    """The plug-ins that read problem files (``run --kernel-problem``), by name."""
    return [(p, p.problem_file) for p in plugins().values() if p.problem_file is not None]


def results_pages() -> list[tuple[ProblemPlugin, ResultsPage]]:
    """The plug-ins with a results page, by name."""
    return [(p, p.results) for p in plugins().values() if p.results is not None]


def get_format(name: str) -> ProblemPlugin:
    """The installed plug-in ``name``, a format included; PluginError when none is installed."""
    plugin = plugins().get(name)
    if plugin is None:
        raise PluginError(
            f"no problem plug-in {name!r} is installed (entry points {ENTRY_POINTS!r}); "
            f"installed: {', '.join(plugins())}"
        )
    return plugin
