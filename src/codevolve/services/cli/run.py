"""``codevolve run``: evolve a problem here, or resume a job; a live progress bar and a summary.

Every option is checked before the job is written. ``--resume JOB`` takes the job's stored
config: an option that would change it (another problem, seed, budget, ...) is refused rather
than ignored; options of this process alone (``--workers``, ``--gpus``, ``--report``, ...) may
differ. Ctrl-C or SIGTERM pauses the job and prints the command that resumes it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from codevolve.core.config import ProposerConfig, RunConfig
from codevolve.core.errors import ConfigError
from codevolve.core.job import Job, JobState
from codevolve.program_db.errors import UnknownJobError
from codevolve.services.cli import dist as cli_dist
from codevolve.services.cli import llm as cli_llm
from codevolve.services.cli import problem_dir, problem_file
from codevolve.services.cli.options import (
    EXIT_FAILED,
    JOB_KEYS,
    REMEASURE_HELP,
    SIGNAL_EXIT,
    at_least,
    cache_dir_option,
    check_problem,
    config_error,
    db_option,
)
from codevolve.services.controller import loop as controller_module
from codevolve.services.run_config import FIELD_OF, NAMES, RunConfigRefused, run_config_of

WIDE = 100  # terminal columns from which the progress bar shows every column in words
NARROW = 72  # terminal columns below which the bar shows its counts only
DEFAULT_WORKERS = 2  # in-process evaluation workers unless --workers or the folder's config says
# Options that define a job: (argparse dest and the API's JSON key, RunConfig field, option as
# typed), from the one map of run_config.
JOB_OPTIONS = tuple((key, FIELD_OF[key], NAMES[FIELD_OF[key]][1] or key) for key in JOB_KEYS)


def register(sub: Any) -> None:
    run = sub.add_parser("run", help="evolve a problem here (embedded workers)")
    run.add_argument("problem", nargs="?", help="problem name, e.g. gemm-tiling")
    run.add_argument("--proposals", type=int, default=None, help="proposal budget (1000)")
    run.add_argument("--seed", type=int, default=None, help="(0)")
    run.add_argument("--islands", type=int, default=None)
    run.add_argument("--max-wall-s", type=float, default=None, help="wall-clock budget, seconds")
    run.add_argument("--in-flight", type=int, default=None, help="proposals in flight at once")
    run.add_argument("--remeasure-samples", type=int, default=None, help=REMEASURE_HELP)
    run.add_argument(
        "--workers",
        type=at_least(1),
        default=None,
        help="in-process evaluation workers (2; a problem folder's evaluator.parallel_evaluations)",
    )
    cli_dist.proposal_processes_option(run)
    run.add_argument(
        "--gpus",
        default=None,
        help="GPU stages: all, none, ids, or cpu (device jobs on the CPU; default: one GPU)",
    )
    run.add_argument("--resume", metavar="JOB", help="continue a job that was interrupted")
    run.add_argument("--report", type=Path, help="write the JSON report here")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    cli_llm.add_run_arguments(run)
    problem_dir.add_run_arguments(run)
    problem_file.add_run_arguments(run)
    db_option(run)
    cache_dir_option(run)
    run.set_defaults(handler=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from codevolve.services.runtime.embedded import run_embedded

    console = Console(stderr=True)
    _check_report_path(args.report)
    config = None
    workers = args.workers or DEFAULT_WORKERS
    if args.resume is not None:
        asyncio.run(_check_resume(args))
    elif args.problem_dir is not None:
        folder = problem_dir.run_config_from_args(args)
        config = folder.config
        workers = args.workers or problem_dir.parallel_evaluations(config) or DEFAULT_WORKERS
        for warning in folder.all_warnings:
            # One line each, however narrow the terminal: a wrapped warning reads as several.
            console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False, soft_wrap=True)
    elif files := problem_file.given(args):
        config = problem_file.run_config_from_args(args, files[0])
    else:
        config = _new_config(args)
    bar = ProgressBar(console, enabled=not args.quiet and console.is_terminal)
    with bar:
        result = asyncio.run(
            run_embedded(
                db_url=args.db,
                config=config,
                resume=args.resume,
                workers=workers,
                proposal_processes=args.proposal_processes,
                gpus=args.gpus,
                on_start=bar.start,
                on_progress=bar.update,
                handle_signals=True,
            )
        )
    if result.interrupted is not None:
        console.print(
            f"interrupted ({result.interrupted}): job {result.job_id} is paused; resume with "
            f"`{resume_command(result.job_id, args.db_given)}`",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        return SIGNAL_EXIT.get(result.interrupted, 130)
    if args.report:
        args.report.write_text(json.dumps(result.report, indent=2) + "\n")
    print_summary(Console(), result.report)
    if result.state is JobState.FAILED:  # (the initial program failed, say): why, last
        sys.stderr.write(
            f"error: job {result.job_id} failed: {' '.join(str(result.error).split())}\n"
        )
    return 0 if result.state in (JobState.DONE, JobState.PAUSED) else EXIT_FAILED


def resume_command(job_id: str, db: str | None) -> str:
    """The command that continues a job, with the ``--db`` the user gave (if any)."""
    words = ["codevolve", "run", "--resume", job_id]
    if db is not None:
        words += ["--db", db]
    return shlex.join(words)


def _new_config(args: argparse.Namespace) -> RunConfig:
    if args.config is not None:
        raise ConfigError("run: --config goes with --problem-dir; drop it or add --problem-dir")
    if not args.problem:
        usages = [file.usage for file in problem_file.formats()]
        choices = ["a problem (e.g. gemm-tiling)", "--problem-dir PATH", *usages, "--resume JOB"]
        raise ConfigError(f"run: name {problem_file.one_of(choices)}")
    check_problem(args.problem)
    fields: dict[str, Any] = {"problem": args.problem, "seed": 0, "max_proposals": 1000}
    keys = {dest: value for dest, _, _ in JOB_OPTIONS if (value := getattr(args, dest)) is not None}
    try:
        if (proposer := cli_llm.proposer_overrides(args)) is not None:
            fields["proposer"] = proposer
        return run_config_of(keys, fields=fields)
    except (ValidationError, RunConfigRefused) as exc:
        raise config_error(exc) from exc


def _check_report_path(report: Path | None) -> None:
    """A report that could not be written is found out now, not after the run."""
    if report is None:
        return
    if report.is_dir():
        raise ConfigError(
            f"--report {report} is a folder; name a file, e.g. {report / 'report.json'}"
        )
    folder = report.parent
    if not folder.is_dir():
        raise ConfigError(f"--report {report}: no folder {folder}; create it first")
    if not os.access(folder, os.W_OK) or (report.exists() and not os.access(report, os.W_OK)):
        raise ConfigError(f"--report {report}: not writable here; pick another path")


async def _check_resume(args: argparse.Namespace) -> None:
    """Refuse ``--resume`` of an unknown job, or with options that contradict its config."""
    from codevolve.program_db import repository
    from codevolve.services.database import reading_session

    async with reading_session(args.db) as session:
        job = await repository.get_job(session, args.resume)
    if job is None:
        raise UnknownJobError(
            f"--resume {args.resume}: no such job in {args.db_shown}; "
            f"check the id and {args.db_option}"
        )
    for problem in contradictions(args, job):
        raise ConfigError(f"--resume {job.id}: {problem}; drop it or start a new job")


def contradictions(args: argparse.Namespace, job: Job) -> list[str]:
    """Each option given with ``--resume`` whose value differs from the job's stored config."""
    stored = job.config
    found = []
    if args.problem is not None and args.problem != stored.problem:
        found.append(f"the job's problem is {stored.problem}, not {args.problem}")
    if args.problem_dir is not None or args.config is not None:
        found.append("--problem-dir/--config cannot change the problem stored with the job")
    for file in problem_file.given(args):
        found.append(f"{file.option} cannot change the problem stored with the job")
    for dest, field, flag in JOB_OPTIONS:
        given = getattr(args, dest)
        if given is not None and given != getattr(stored, field):
            found.append(f"the job's {flag} is {getattr(stored, field)}, not {given}")
    if args.proposer is not None or args.model or args.max_cost is not None:
        given = ProposerConfig.model_validate(cli_llm.proposer_overrides(args) or {})
        if given != stored.proposer:
            kind = stored.proposer.kind
            found.append(f"--proposer/--model/--max-cost differ from the job's {kind} proposer")
    return found


# --------------------------------------------------------------------------- progress, summary


class ProgressBar:
    """proposals, evaluations per second, failures and the best score, live; on a terminal
    narrower than :data:`WIDE` the columns are abbreviated rather than cut."""

    def __init__(self, console: Console, *, enabled: bool) -> None:
        self._console = console
        self._enabled = enabled
        self._bar = Progress(*progress_columns(console.width), console=console, disable=not enabled)
        self._task: Any = None

    def __enter__(self) -> ProgressBar:
        self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.__exit__(None, None, None)

    def start(self, job: Job) -> None:
        self._console.print(
            f"job [bold]{job.id}[/bold] ({job.config.label or job.config.problem}, "
            f"seed {job.config.seed})"
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

    def table(self) -> Any:
        """The bar as rich renders it now (for tests)."""
        return self._bar.make_tasks_table(self._bar.tasks)


def progress_columns(width: int) -> list[ProgressColumn | str]:
    """Every column in words from :data:`WIDE` columns; abbreviated below; below
    :data:`NARROW` the bar and the clock go, so that the counts are never cut."""
    if width >= WIDE:
        return [
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "{task.fields[rate]:.1f} eval/s  failed {task.fields[failed]}  "
                "rejected {task.fields[rejected]}  best {task.fields[best]}"
            ),
            TimeElapsedColumn(),
        ]
    counts: list[ProgressColumn | str] = [
        MofNCompleteColumn(),
        TextColumn(
            "{task.fields[rate]:.0f}/s fail {task.fields[failed]} "
            "rej {task.fields[rejected]} best {task.fields[best]}"
        ),
    ]
    if width < NARROW:
        return counts
    return [BarColumn(bar_width=min(20, width - 64)), *counts, TimeElapsedColumn()]


def print_summary(console: Console, report: dict[str, Any]) -> None:
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
            f"score (confirmed on {report['remeasure_samples']} fresh samples): "
            f"initial {_fmt(report.get('initial_score'))}, best {_fmt(report.get('best_score'))}; "
            f"as picked: initial {_fmt(report.get('initial_picked_score'))}, "
            f"best {_fmt(report.get('best_picked_score'))}"
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
    legality = report.get("best_legality")
    if legality is not None:
        console.print(f"its legality: {legality['text']}", markup=False)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
