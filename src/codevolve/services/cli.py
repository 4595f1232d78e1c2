"""The ``codevolve`` command line.

codevolve run gemm-tiling --proposals 1000 --seed 0 [--db URL] [--report out.json]
codevolve run --resume JOB [--db URL]
codevolve evaluate --problem gemm-tiling --program FILE [--shapes SHAPES.json] --json
codevolve best JOB | show PROGRAM | status JOB | db upgrade
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from codevolve.core.config import RunConfig
from codevolve.core.errors import CodevolveError
from codevolve.core.job import Job
from codevolve.services import bundles, cli_dist, cli_export, cli_llm, cli_token
from codevolve.services import controller as controller_module
from codevolve.services.database import database_session
from codevolve.services.settings import Settings, normalise_db_url

EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = Settings()
    logging.basicConfig(
        level=getattr(args, "log_level", None) or settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if getattr(args, "db", None) is None:
        args.db = settings.db
    args.db = normalise_db_url(args.db)
    try:
        result: int = args.handler(args)
        return result
    except (CodevolveError, ValidationError, LookupError) as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        Console(stderr=True).print("interrupted; resume with --resume JOB")
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codevolve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING (default)")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="evolve a problem here (embedded workers)")
    run.add_argument("problem", nargs="?", help="problem name, e.g. gemm-tiling")
    run.add_argument("--proposals", type=int, default=None, help="proposal budget (1000)")
    run.add_argument("--seed", type=int, default=None, help="(0)")
    run.add_argument("--islands", type=int, default=None)
    run.add_argument("--max-wall-s", type=float, default=None, help="wall-clock budget, seconds")
    run.add_argument("--in-flight", type=int, default=None, help="proposals in flight at once")
    run.add_argument("--workers", type=int, default=2, help="in-process evaluation workers")
    cli_dist.proposal_processes_option(run)
    run.add_argument(
        "--gpus", default=None, help="GPU stages: all, none or ids (default: one GPU if needed)"
    )
    run.add_argument("--resume", metavar="JOB", help="continue a job that was interrupted")
    run.add_argument("--report", type=Path, help="write the JSON report here")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    cli_llm.add_run_arguments(run)
    bundles.add_run_arguments(run)
    _db_option(run)
    run.set_defaults(handler=_cmd_run)

    evaluate = sub.add_parser("evaluate", help="score one program file")
    evaluate.add_argument("--problem", required=True)
    evaluate.add_argument("--program", type=Path, required=True)
    evaluate.add_argument("--shapes", type=Path, help="gemm: JSON list of [M, N, K]")
    evaluate.add_argument("--json", action="store_true", help="print JSON")
    evaluate.set_defaults(handler=_cmd_evaluate, db=None)

    best = sub.add_parser("best", help="print the best program's source of a job")
    best.add_argument("job")
    _db_option(best)
    best.set_defaults(handler=_cmd_best)

    show = sub.add_parser("show", help="print a program's metrics")
    show.add_argument("program")
    show.add_argument("--json", action="store_true")
    cli_llm.add_show_arguments(show)
    _db_option(show)
    show.set_defaults(handler=_cmd_show)

    status = sub.add_parser("status", help="a job's state, counts and best score")
    status.add_argument("job")
    status.add_argument("--json", action="store_true")
    _db_option(status)
    status.set_defaults(handler=_cmd_status)

    db = sub.add_parser("db", help="database maintenance")
    db.add_argument("action", choices=["upgrade"])
    _db_option(db)
    db.set_defaults(handler=_cmd_db)

    cli_dist.register(sub)
    cli_token.register(sub)
    cli_export.register(sub)
    return parser


def _db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", default=None, help="database URL or SQLite file (default: ./codevolve.sqlite)"
    )


# ------------------------------------------------------------------- run


def _cmd_run(args: argparse.Namespace) -> int:
    from codevolve.services.runtime import run_embedded

    config = None
    console = Console(stderr=True)
    if args.resume is None and args.problem_dir is not None:
        config, warnings = bundles.run_config_from_args(args)
        for warning in warnings:
            console.print(f"[yellow]warning:[/yellow] config: {warning}")
    elif args.resume is None:
        if args.config is not None:
            raise CodevolveError("run: --config goes with --problem-dir")
        if not args.problem:
            raise CodevolveError(
                "run: name a problem (e.g. gemm-tiling), --problem-dir PATH or --resume JOB"
            )
        overrides: dict[str, Any] = {
            "problem": args.problem,
            "seed": 0 if args.seed is None else args.seed,
            "max_proposals": 1000 if args.proposals is None else args.proposals,
        }
        if args.islands is not None:
            overrides["islands"] = args.islands
        if args.max_wall_s is not None:
            overrides["max_wall_s"] = args.max_wall_s
        if args.in_flight is not None:
            overrides["max_in_flight"] = args.in_flight
        if (proposer := cli_llm.proposer_overrides(args)) is not None:
            overrides["proposer"] = proposer
        config = RunConfig.model_validate(overrides)
    bar = _ProgressBar(console, enabled=not args.quiet and console.is_terminal)
    with bar:
        result = asyncio.run(
            run_embedded(
                db_url=args.db,
                config=config,
                resume=args.resume,
                workers=args.workers,
                proposal_processes=args.proposal_processes,
                gpus=args.gpus,
                on_start=bar.start,
                on_progress=bar.update,
            )
        )
    if args.report:
        args.report.write_text(json.dumps(result.report, indent=2) + "\n")
    _print_summary(Console(), result.report)
    return 0 if result.state.value in ("done", "paused") else 1


class _ProgressBar:
    """proposals, evaluations per second, failures and the best score, live."""

    def __init__(self, console: Console, *, enabled: bool) -> None:
        self._console = console
        self._enabled = enabled
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "{task.fields[rate]:.1f} eval/s  failed {task.fields[failed]}  "
                "rejected {task.fields[rejected]}  best {task.fields[best]}"
            ),
            TimeElapsedColumn(),
            console=console,
            disable=not enabled,
        )
        self._task: Any = None

    def __enter__(self) -> _ProgressBar:
        self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.__exit__(None, None, None)

    def start(self, job: Job) -> None:
        self._console.print(
            f"job [bold]{job.id}[/bold] ({job.config.problem}, seed {job.config.seed})"
        )
        self._task = self._bar.add_task(
            "proposals", total=job.config.max_proposals, rate=0.0, failed=0, rejected=0, best="-"
        )

    def update(self, progress: controller_module.Progress) -> None:
        if self._task is None:
            return
        best = "-" if progress.best_score is None else f"{progress.best_score:.4f}"
        self._bar.update(
            self._task,
            completed=progress.proposals,
            rate=progress.evaluated_per_s,
            failed=progress.failed + progress.apply_failed,
            rejected=progress.rejected,
            best=best,
        )


def _print_summary(console: Console, report: dict[str, Any]) -> None:
    console.print(
        f"job {report['job_id']}: {report['state']}, {report['proposals']} proposals, "
        f"{report['evaluated']} evaluated, {report['rejected']} rejected, "
        f"{report['failed']} failed, {report['apply_failed']} did not apply, "
        f"{report['duplicates']} duplicates, {report['wall_s']:.1f} s"
    )
    cli_llm.print_usage(console, report)
    train, test = report["train"], report["test"]
    columns = [name for name in train if name != "evolved_over_oracle"]
    if columns == ["evolved"]:  # no baselines (a bundle): the score is the evaluator's own
        console.print(
            f"score: initial {_fmt(report.get('initial_score'))}, "
            f"best {_fmt(report.get('best_score'))}"
        )
        console.print(f"best program: {report['best_program_id']}")
        return
    table = Table(title="geomean speedup over the initial program (higher is better)")
    table.add_column("split")
    for name in columns:
        table.add_column(name, justify="right")
    table.add_column("evolved / oracle", justify="right")
    for split, row in (("train", train), ("test", test)):
        table.add_row(
            split, *[_fmt(row.get(name)) for name in columns], _fmt(row.get("evolved_over_oracle"))
        )
    console.print(table)
    console.print(f"best program: {report['best_program_id']}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# ---------------------------------------------------------------- others


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from codevolve.services.evaluate import evaluate_file

    shapes = json.loads(args.shapes.read_text()) if args.shapes else None
    result = evaluate_file(problem=args.problem, program=args.program, shapes=shapes)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        Console().print_json(json.dumps(result))
    return 0


def _cmd_best(args: argparse.Namespace) -> int:
    async def go() -> str:
        async with database_session(args.db) as session:
            from codevolve.program_db import repository

            if await repository.get_job(session, args.job) is None:
                raise LookupError(f"no job {args.job!r} in {args.db}")
            best = await repository.best_program(session, args.job)
            if best is None:
                raise LookupError(f"job {args.job} has no evaluated program yet")
            return best.source

    sys.stdout.write(asyncio.run(go()))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from codevolve.services.views import program_summary

    async def go() -> dict[str, Any]:
        async with database_session(args.db) as session:
            from codevolve.program_db import repository

            program = await repository.get_program(session, args.program)
            if program is None:
                raise LookupError(f"no program {args.program!r} in {args.db}")
            from codevolve.services.usage_views import program_proposal

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
    from codevolve.services.views import job_status

    async def go() -> dict[str, Any]:
        async with database_session(args.db) as session:
            return await job_status(session, args.job)

    status = asyncio.run(go())
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        Console().print_json(json.dumps(status))
    return 0


def _cmd_db(args: argparse.Namespace) -> int:
    from codevolve.program_db.engine import create_engine, upgrade

    async def go() -> None:
        engine = create_engine(args.db)
        try:
            await upgrade(engine)
        finally:
            await engine.dispose()

    asyncio.run(go())
    print(f"database at head: {args.db}")
    return 0


def _print_program(console: Console, summary: dict[str, Any]) -> None:
    table = Table(title=f"program {summary['id']}", show_header=False)
    for key in (
        "job_id",
        "status",
        "score",
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
    console.print(table)
    if summary.get("feedback"):
        console.print(summary["feedback"])


if __name__ == "__main__":
    raise SystemExit(main())
