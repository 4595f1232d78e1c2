"""What a runner role is: the code that runs one program inside a runner (runner.py) and
answers the judge's requests about it.

The runner owns the process, the cage and the messages; a role owns the program. A judge names
the role's module in its ``load`` request (a dotted name: the judge is trusted, the runner
imports only what it is told); the runners' zygote imports each role its pool has been asked to
preload ahead of the fork (``RunnerPool.preload``), so a runner costs no import. A role module
defines:

- ``load(message, context) -> Role | str``: the program of the ``load`` request loaded in the
  runner (after the cage is up), or why it did not load (the reply's ``load_error``);
- optionally ``warm()``: called once in the zygote after the import (first uses that take
  seconds, such as torch's dispatch machinery).

A :class:`Role` answers the requests its ``ops()`` names; what the program did wrong it raises
as :class:`ProgramProblem` (the reply's ``problem``); anything else ends the runner (a fault).

Imported in runners (stdlib only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

Op = Callable[[dict[str, Any]], dict[str, Any]]  # a request's message -> the reply


class ProgramProblem(Exception):
    """What the program did wrong, sent to the judge as ``problem``."""


@dataclass(frozen=True, slots=True)
class RoleContext:
    """What the runner gives a role: its arena (shared_tensors.Arena), device and folder."""

    arena: Any
    device: str  # "cuda" or "cpu"
    scratch: str  # the runner's own writable folder
    rules: bool  # the source rules (a filter) before a candidate loads; off in tests only


class Role(Protocol):
    def ops(self) -> dict[str, Op]:
        """The requests this role answers, by name."""
        ...
