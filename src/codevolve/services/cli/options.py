"""What users type on the command line: shared options, and the messages that name them.

A run's options become :class:`~codevolve.core.config.RunConfig` fields through
:func:`~codevolve.services.run_config.run_config_of`, the function the API calls too; when the
config refuses a value, :func:`config_error` names the option the user typed (``--proposals``),
not the field (``max_proposals``).
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from codevolve.core.cache_dir import CACHE_ENV
from codevolve.core.errors import ConfigError, UnknownProblemError
from codevolve.problems.registry import problem_names
from codevolve.services.run_config import RunConfigRefused, refusals_of
from codevolve.services.settings import DB_HELP

EXIT_FAILED = 1  # the command ran and its subject failed (a program rejected, a job failed)
EXIT_USAGE = 2  # what the user typed cannot be used; nothing was changed
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal's number, as shells report it
# The job keys ``run`` takes as options (argparse dests, the API's JSON keys: run_config.NAMES),
# in the order ``--resume`` checks them.
JOB_KEYS = ("seed", "proposals", "islands", "max_wall_s", "in_flight", "remeasure_samples")
REMEASURE_HELP = (
    "independent samples a would-be best is re-measured on before it counts (5; a deterministic "
    "evaluator needs 1)"
)


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line naming the command and where its help is."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(EXIT_USAGE)


def db_option(parser: argparse.ArgumentParser) -> None:
    """``--db``, with the one default every command shares."""
    parser.add_argument("--db", default=None, help=DB_HELP)


def cache_dir_option(parser: argparse.ArgumentParser) -> None:
    """``--cache-dir``: the worker's cache folder (core/cache_dir.py) for this command and the
    processes it starts."""
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="what workers keep between runs: the gemm cost model's tables, torch.compile's "
        "caches of KernelBench references (default: $CODEVOLVE_CACHE_DIR, else "
        "$XDG_CACHE_HOME/codevolve or ~/.cache/codevolve)",
    )


def use_cache_dir(args: argparse.Namespace) -> None:
    """Point this process and its children at ``--cache-dir``, where the command takes it."""
    folder = getattr(args, "cache_dir", None)
    if folder is not None:
        os.environ[CACHE_ENV] = str(folder.expanduser().resolve())


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


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (e.g. 0.5), got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text!r}")
    return value


def config_error(
    exc: ValidationError | RunConfigRefused, *, other: str = "config field"
) -> ConfigError:
    """One line naming each refused option (``--proposals``, not the field ``max_proposals``)
    and the value the user gave; a field no option sets is named after ``other``."""
    refusals = exc.refusals if isinstance(exc, RunConfigRefused) else refusals_of(exc)
    parts = [
        f"{refusal.option or f'{other} {refusal.path}'.strip()} {refusal.requirement}"
        for refusal in refusals
    ]
    return ConfigError("; ".join(parts) or str(exc).splitlines()[0])


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
