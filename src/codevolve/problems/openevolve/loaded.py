"""The bundle problems this process has built, by name (``bundle:<sha256>``).

A bundle's problem is built once per process, by whichever side meets it first (the CLI loading a
folder, a controller reading the database, a worker writing files it received), and found here by
name afterwards: embedded workers share the controller's process and resolve names, not files.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from codevolve.problems.openevolve.bundle import KERNEL_SPEC, Bundle, read_folder
from codevolve.problems.openevolve.problem import OpenEvolveProblem

if TYPE_CHECKING:
    from codevolve.problems.kernelbench.problem import KernelBenchProblem

BundleProblem: TypeAlias = "OpenEvolveProblem | KernelBenchProblem"

_problems: dict[str, BundleProblem] = {}
_lock = threading.Lock()


def problem_of(bundle: Bundle) -> BundleProblem:
    """The bundle's problem, built on first use and remembered under ``bundle.name``."""
    with _lock:
        problem = _problems.get(bundle.name)
        if problem is None:
            problem = _problems[bundle.name] = _build(bundle)
        return problem


def _build(bundle: Bundle) -> BundleProblem:
    if KERNEL_SPEC in bundle.files:
        from codevolve.problems.kernelbench.problem import kernelbench_problem
        from codevolve.problems.kernelbench.spec import spec_of_files

        return kernelbench_problem(spec_of_files(bundle.files), bundle)
    return OpenEvolveProblem(bundle)


def openevolve_problem(bundle: Bundle) -> OpenEvolveProblem:
    """The bundle's problem where only the OpenEvolve layout is meant (a problem folder)."""
    problem = problem_of(bundle)
    if not isinstance(problem, OpenEvolveProblem):
        raise TypeError(f"{bundle.name} is a KernelBench bundle, not a problem folder")
    return problem


def loaded_problem(name: str) -> BundleProblem | None:
    """A problem built here before, by its name; None when this process has not met it."""
    with _lock:
        return _problems.get(name)


def load_problem(directory: Path) -> BundleProblem:
    """The problem of a bundle folder on disk (what a worker writes from stored files): every
    file is taken as written, so the bundle keeps the id it was stored under."""
    return problem_of(read_folder(directory))
