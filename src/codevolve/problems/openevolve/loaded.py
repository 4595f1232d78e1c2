"""The bundle problems this process has built, by name (``bundle:<sha256>``).

A bundle's problem is built once per process, by whichever side meets it first (the CLI loading a
folder, a controller reading the database, a worker writing files it received), and found here by
name afterwards: embedded workers share the controller's process and resolve names, not files.
"""

from __future__ import annotations

import threading
from pathlib import Path

from codevolve.problems.openevolve.bundle import Bundle, read_folder
from codevolve.problems.openevolve.problem import OpenEvolveProblem

_problems: dict[str, OpenEvolveProblem] = {}
_lock = threading.Lock()


def problem_of(bundle: Bundle) -> OpenEvolveProblem:
    """The bundle's problem, built on first use and remembered under ``bundle.name``."""
    with _lock:
        problem = _problems.get(bundle.name)
        if problem is None:
            problem = _problems[bundle.name] = OpenEvolveProblem(bundle)
        return problem


def loaded_problem(name: str) -> OpenEvolveProblem | None:
    """A problem built here before, by its name; None when this process has not met it."""
    with _lock:
        return _problems.get(name)


def load_problem(directory: Path) -> OpenEvolveProblem:
    """The problem of a bundle folder on disk (what a worker writes from stored files): every
    file is taken as written, so the bundle keeps the id it was stored under."""
    return problem_of(read_folder(directory))
