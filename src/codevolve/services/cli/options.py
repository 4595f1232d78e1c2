"""What users type on the command line: shared options, and the messages that name them.

A run's options become :class:`~codevolve.core.config.RunConfig` fields; when the config refuses a
value, :func:`config_error` names the option the user typed (``--proposals``), not the field
(``max_proposals``). :data:`FLAGS` is the one map between the two.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from pydantic import ValidationError

from codevolve.core.errors import ConfigError, UnknownProblemError
from codevolve.problems.registry import problem_names
from codevolve.services.settings import DB_HELP

EXIT_FAILED = 1  # the command ran and its subject failed (a program rejected, a job failed)
EXIT_USAGE = 2  # what the user typed cannot be used; nothing was changed

# RunConfig field (dotted for nested ones) -> the option that sets it.
FLAGS: dict[str, str] = {
    "problem": "PROBLEM",
    "seed": "--seed",
    "max_proposals": "--proposals",
    "max_wall_s": "--max-wall-s",
    "islands": "--islands",
    "max_in_flight": "--in-flight",
    "proposer.max_cost_usd": "--max-cost",
    "proposer.deadline_s": "--deadline-s",
    "proposer.models": "--model",
    "proposer.models.*.name": "--model",
    "proposer.models.*.weight": "--model NAME:WEIGHT",
    "proposer.models.*.temperature": "--temperature",
    "proposer.models.*.max_tokens": "--max-tokens",
    "proposer.models.*.max_concurrency": "--llm-concurrency",
    "proposer.models.*.price_in": "--price",
    "proposer.models.*.price_out": "--price",
}


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line naming the command and where its help is."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(EXIT_USAGE)


def db_option(parser: argparse.ArgumentParser) -> None:
    """``--db``, with the one default every command shares."""
    parser.add_argument("--db", default=None, help=DB_HELP)


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer no smaller than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def config_error(exc: ValidationError, *, other: str = "config field") -> ConfigError:
    """One line naming each refused option and the value the user gave."""
    parts = []
    for error in exc.errors(include_url=False):
        location = tuple(error["loc"])
        flag = flag_of(location) or f"{other} {'.'.join(str(p) for p in location)}".strip()
        parts.append(f"{flag} {_requirement(error)}")
    return ConfigError("; ".join(parts) or str(exc).splitlines()[0])


def flag_of(location: Sequence[int | str]) -> str | None:
    """The option behind a RunConfig location (list indices match ``*``)."""
    dotted = ".".join("*" if isinstance(part, int) else part for part in location)
    return FLAGS.get(dotted)


def _requirement(error: Any) -> str:
    bound = error.get("ctx", {})
    given = error.get("input")
    kind = error["type"]
    words = {
        "greater_than_equal": f"must be at least {bound.get('ge')}",
        "greater_than": f"must be more than {bound.get('gt')}",
        "less_than_equal": f"must be at most {bound.get('le')}",
        "less_than": f"must be less than {bound.get('lt')}",
    }.get(kind)
    if words is None:
        message = str(error["msg"]).removeprefix("Value error, ")
        return f"is invalid: {message}" if given is None else f"is invalid: {message}, got {given}"
    return f"{words}, got {given}"


def check_problem(name: str) -> None:
    """Refuse an unknown built-in problem name, suggesting the closest known one."""
    known = problem_names()
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise UnknownProblemError(
        f"unknown problem {name!r}; {hint}known problems: {', '.join(known)} "
        "(or --problem-dir PATH for a problem folder)"
    )
