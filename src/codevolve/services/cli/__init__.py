"""The ``codevolve`` command line, and the one place its errors become one line.

Every error a user can cause is a CodevolveError (or a file or database that cannot be used): it
is printed as one ``error:`` line on stderr and the exit code says what kind of failure it was
(docs/errors.md). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from codevolve.core.errors import CodevolveError
from codevolve.problems.errors import PluginError
from codevolve.program_db.errors import UnknownJobError, UnknownProgramError
from codevolve.services.cli import dist as cli_dist
from codevolve.services.cli import evaluate as cli_evaluate
from codevolve.services.cli import export as cli_export
from codevolve.services.cli import kernelbench as cli_kernelbench
from codevolve.services.cli import llm as cli_llm
from codevolve.services.cli import run as cli_run
from codevolve.services.cli import tokens as cli_token
from codevolve.services.cli.options import (
    EXIT_USAGE,
    Parser,
    config_error,
    db_option,
    use_cache_dir,
)
from codevolve.services.database import DatabaseUnusable, reading_session, shown
from codevolve.services.settings import Settings, normalise_db_url

DESCRIPTION = """\
Evolve programs against a problem's evaluator (AlphaEvolve style).

examples:
  codevolve run gemm-tiling --proposals 1000 --seed 0 --report out.json
  codevolve run --resume JOB
  codevolve evaluate --problem gemm-tiling --program my_program.py
  codevolve evaluate --problem-dir my_problem [--program candidate.py]
  codevolve status JOB        codevolve best JOB        codevolve show PROGRAM
  codevolve serve             codevolve submit gemm-tiling     codevolve worker

Every command that takes --db uses $CODEVOLVE_DB when --db is not given, else the SQLite file
./codevolve.sqlite. Exit codes: 0 done, 1 the program or job failed, 2 unusable input (nothing
was changed), 130 or 143 interrupted (the job is paused). Errors: docs/errors.md.
"""


def main(argv: list[str] | None = None) -> int:
    try:
        parser = _parser()  # the problem plug-ins' options: the registry is read here
    except PluginError as exc:
        return _fail(str(exc))
    args = parser.parse_args(argv)
    try:
        settings = Settings()
    except ValidationError as exc:
        (first, *_) = exc.errors(include_url=False)
        name = f"CODEVOLVE_{'_'.join(str(part) for part in first['loc']).upper()}"
        return _fail(f"environment: {name}={first.get('input')!r} is invalid: {first['msg']}")
    logging.basicConfig(
        level=getattr(args, "log_level", None) or settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    args.db_given = getattr(args, "db", None)
    # What names the database in errors: --db, or the variable its URL came from.
    args.db_option = "--db" if args.db_given else settings.db_option
    try:
        args.db = normalise_db_url(args.db_given or settings.db, option=args.db_option)
        args.db_shown = shown(args.db)
        use_cache_dir(args)
        result: int = args.handler(args)
        return result
    except DatabaseUnusable as exc:
        return _fail(exc.named_by(args.db_option))
    except CodevolveError as exc:
        return _fail(str(exc))
    except ValidationError as exc:
        return _fail(str(config_error(exc)))
    except OSError as exc:
        if exc.filename is None:  # not a file the user named: a bug or the system's trouble
            raise
        return _fail(f"{exc.filename}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130


def _fail(message: str) -> int:
    """One line on stderr (plain text: no markup, no wrapping), and the usage exit code."""
    sys.stderr.write(f"error: {' '.join(message.split())}\n")
    return EXIT_USAGE


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="codevolve",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING (default)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cli_run.register(sub)

    cli_evaluate.register(sub)

    best = sub.add_parser("best", help="print the best program's source of a job")
    best.add_argument("job")
    db_option(best)
    best.set_defaults(handler=_cmd_best)

    show = sub.add_parser("show", help="print a program's metrics")
    show.add_argument("program")
    show.add_argument("--json", action="store_true")
    cli_llm.add_show_arguments(show)
    db_option(show)
    show.set_defaults(handler=_cmd_show)

    status = sub.add_parser("status", help="a job's state, counts and best score")
    status.add_argument("job")
    status.add_argument("--json", action="store_true", help="print every field as JSON")
    db_option(status)
    status.set_defaults(handler=_cmd_status)

    db = sub.add_parser("db", help="database maintenance")
    db.add_argument("action", choices=["upgrade"])
    db_option(db)
    db.set_defaults(handler=_cmd_db)

    cli_dist.register(sub)
    cli_token.register(sub)
    cli_export.register(sub)
    cli_kernelbench.register(sub)
    return parser


# ------------------------------------------------------------------ commands


def _cmd_best(args: argparse.Namespace) -> int:
    from codevolve.program_db import repository

    async def go() -> str:
        async with reading_session(args.db) as session:
            if await repository.get_job(session, args.job) is None:
                raise _no_job(args)
            # The job's best is the best confirmed program (re-measured on fresh seeds), never
            # one whose figure came from the lucky samples it was picked on.
            best = await repository.confirmed_best(session, args.job)
            if best is None:
                raise UnknownProgramError(
                    f"job {args.job} has no confirmed best program yet; "
                    f"`codevolve status {args.job}` shows its progress"
                )
            return best.source

    sys.stdout.write(asyncio.run(go()))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from codevolve.program_db import repository
    from codevolve.services.read_models.usage import program_proposal
    from codevolve.services.read_models.views import program_summary

    async def go() -> dict[str, Any]:
        async with reading_session(args.db) as session:
            program = await repository.get_program(session, args.program)
            if program is None:
                raise UnknownProgramError(
                    f"no program {args.program!r} in {args.db_shown}; "
                    "`codevolve status JOB --json` names a job's best program"
                )
            proposal = await program_proposal(session, program)
            return {**program_summary(program), "proposal": proposal}

    summary = asyncio.run(go())
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_program(Console(), summary)
        cli_llm.print_proposal(Console(), summary["proposal"], texts=args.prompt)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from codevolve.program_db import repository
    from codevolve.services.cli.summaries import print_status
    from codevolve.services.read_models.views import job_status

    async def go() -> dict[str, Any]:
        async with reading_session(args.db) as session:
            if await repository.get_job(session, args.job) is None:
                raise _no_job(args)
            return await job_status(session, args.job)

    status = asyncio.run(go())
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print_status(Console(highlight=False, soft_wrap=True), status)
    return 0


def _no_job(args: argparse.Namespace) -> UnknownJobError:
    return UnknownJobError(
        f"no job {args.job!r} in {args.db_shown}; check the id and {args.db_option}"
    )


def _cmd_db(args: argparse.Namespace) -> int:
    from codevolve.services.database import open_database

    async def go() -> None:
        async with open_database(args.db, write=True):
            pass

    asyncio.run(go())
    print(f"database at head: {args.db_shown}")
    return 0


def _print_program(console: Console, summary: dict[str, Any]) -> None:
    table = Table(title=f"program {summary['id']}", show_header=False)
    for key in ("job_id", "status"):
        table.add_row(key, str(summary.get(key)))
    # The figure the search picked it on, and (re-measured as a would-be best) the confirmed
    # one: `status` and the run's summary show the latter for the job's best.
    table.add_row("score (as evaluated)", str(summary.get("score")))
    remeasure = summary.get("remeasure")
    if remeasure is not None:
        confirmed = remeasure["confirmed"]
        samples = len(remeasure["samples"])
        table.add_row(
            "score (confirmed)",
            f"{remeasure['verdict']}: {confirmed} on {samples} fresh samples"
            if confirmed is not None
            else f"{remeasure['verdict']}: {remeasure['note']}",
        )
    for key in (
        "island",
        "generation",
        "parent_id",
        "proposer",
        "error",
    ):
        table.add_row(key, str(summary.get(key)))
    for name, value in summary["metrics"].items():
        table.add_row(f"metric {name}", f"{value:.4f}")
    for name, value in summary["heldout"].items():
        table.add_row(f"held-out {name}", f"{value:.4f}")
    for name, value in summary["stage_scores"].items():
        table.add_row(f"stage {name}", f"{value:.4f}")
    if summary.get("legality") is not None:
        table.add_row("legality", summary["legality"]["text"])
    console.print(table)
    if summary.get("feedback"):
        console.print(summary["feedback"])


if __name__ == "__main__":
    raise SystemExit(main())
