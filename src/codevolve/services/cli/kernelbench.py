"""``codevolve kernelbench --dir PATH``: evolve a set of KernelBench-format problems, report fast_p.

The user points at their own checkout (``--dir KernelBench --level 1`` reads
``KernelBench/level1/`` or ``KernelBench/KernelBench/level1/``); ``--problems 1-20,40`` picks
problems by KernelBench's number. Each problem is one job in the database, run in turn here; the
same command run again continues where it stopped: a finished problem's job is reused, an
interrupted one resumed, so a set too large for one sitting is carried over several. The end is a
table per problem and fast_p for p in 0, 1, 1.5, 2 against eager and ``torch.compile`` (the
rows and figures of the plug-in's results page: problems/kernelbench/results.py), also written as
JSON with ``--report``. ``--report-only`` prints
that table from what the database holds and runs nothing: each problem's newest job with the
same seed and a budget of at most ``--proposals`` (a problem re-run with a larger budget shows
that run); a problem without one counts as not run (not solved), one still running or
interrupted shows its best so far.

The command reaches KernelBench only through its plug-in (the registry's ``kernelbench``): its
problem-file reader and its results page.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from codevolve.core.config import RunConfig
from codevolve.core.errors import ConfigError
from codevolve.core.job import Job, JobState
from codevolve.core.plugin import ProblemPlugin
from codevolve.core.problem_file import ProblemFile
from codevolve.core.results import ResultsPage, Row
from codevolve.problems import registry
from codevolve.problems.errors import PluginError
from codevolve.services.cli import llm as cli_llm
from codevolve.services.cli.options import (
    EXIT_FAILED,
    REMEASURE_HELP,
    SIGNAL_EXIT,
    at_least,
    cache_dir_option,
    db_option,
)
from codevolve.services.cli.problem_file import (
    add_settings_arguments,
    file_run_config,
    settings,
)

if TYPE_CHECKING:
    from codevolve.evaluator_workers.gpu.device_process import DeviceProcess

_NUMBERED = re.compile(r"^(\d+)_.*\.py$")
FORMAT = "kernelbench"  # the plug-in whose files and results page the command uses


def kernelbench() -> tuple[ProblemPlugin, ProblemFile, ResultsPage]:
    """The plug-in, its problem-file reader and its results page (PluginError without them)."""
    plugin = registry.get_format(FORMAT)
    if plugin.problem_file is None or plugin.results is None:
        raise PluginError(f"problem plug-in {FORMAT!r} reads no problem file or has no results")
    return plugin, plugin.problem_file, plugin.results


def register(sub: Any) -> None:
    """The command, where the plug-in is installed."""
    plugin = registry.plugins().get(FORMAT)
    if plugin is None or plugin.problem_file is None:
        return
    bench = sub.add_parser(
        "kernelbench", help="evolve a set of KernelBench-format problems and report fast_p"
    )
    bench.add_argument("--dir", type=Path, required=True, help="a KernelBench checkout or folder")
    bench.add_argument("--level", type=int, default=None, help="KernelBench level (1, 2, 3, ...)")
    bench.add_argument(
        "--problems", default=None, metavar="RANGES", help="problem numbers, e.g. 1-20,40 (all)"
    )
    bench.add_argument(
        "--proposals", type=at_least(1), default=100, help="proposals per problem (100)"
    )
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--remeasure-samples", type=int, default=None, help=REMEASURE_HELP)
    bench.add_argument("--workers", type=at_least(1), default=2, help="evaluation workers (2)")
    bench.add_argument("--gpus", default=None, help="all, ids, or cpu (default: one GPU)")
    bench.add_argument("--report", type=Path, help="write the per-problem table as JSON here")
    bench.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: the table of each problem's newest job within --proposals",
    )
    add_settings_arguments(bench, plugin.problem_file)
    cli_llm.add_run_arguments(bench)
    db_option(bench)
    cache_dir_option(bench)
    bench.set_defaults(handler=_cmd_kernelbench)


def problem_folder(root: Path, level: int | None) -> Path:
    """The folder holding the problem files (ConfigError naming what was looked for)."""
    if not root.is_dir():
        raise ConfigError(f"--dir {root}: no such folder")
    if level is None:
        return root
    tried = [root / f"level{level}", root / "KernelBench" / f"level{level}"]
    for folder in tried:
        if folder.is_dir():
            return folder
    raise ConfigError(
        f"--dir {root} --level {level}: no folder {' or '.join(str(t) for t in tried)}"
    )


def parse_ranges(text: str) -> set[int]:
    """``1-20,40`` -> {1..20, 40} (ConfigError naming the part that is not a range)."""
    numbers: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        found = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not found:
            raise ConfigError(f"--problems {text}: {part!r} is not a number or a range like 1-20")
        low = int(found.group(1))
        high = int(found.group(2) or low)
        if high < low:
            raise ConfigError(f"--problems {text}: the range {part} runs backwards")
        numbers.update(range(low, high + 1))
    return numbers


def problem_files(folder: Path, wanted: set[int] | None) -> list[Path]:
    """The numbered problem files of ``folder``, by number, limited to ``wanted``."""
    files = []
    for path in folder.iterdir():
        found = _NUMBERED.match(path.name)
        if found and path.is_file() and (wanted is None or int(found.group(1)) in wanted):
            files.append((int(found.group(1)), path))
    if not files:
        which = "" if wanted is None else " with the numbers --problems gives"
        raise ConfigError(f"{folder}: no KernelBench problem files (NN_Name.py){which}")
    return [path for _, path in sorted(files)]


def _cmd_kernelbench(args: argparse.Namespace) -> int:
    folder = problem_folder(args.dir, args.level)
    wanted = None if args.problems is None else parse_ranges(args.problems)
    files = problem_files(folder, wanted)
    not_run = len(problem_files(folder, None)) - len(files) if wanted is not None else 0
    plugin, reader, _ = kernelbench()
    judged = settings(reader, args)
    args.proposals_given = args.proposals
    console = Console(stderr=True)
    configs: list[tuple[str, RunConfig]] = []
    refused: list[tuple[str, str]] = []
    for path in files:
        try:
            bundle = reader.read(path.read_text(encoding="utf-8"), path.stem, judged)
        except (ConfigError, UnicodeDecodeError) as exc:
            refused.append((path.stem, str(exc)))
            console.print(f"[yellow]skipped:[/yellow] {exc}", highlight=False, soft_wrap=True)
            continue
        configs.append((path.stem, file_run_config(bundle, args, fields={"label": path.name})))
    console.print(
        f"{len(configs)} problems from {folder}, {args.proposals} proposals each"
        + (f"; {len(refused)} skipped" if refused else "")
    )
    if args.report_only:
        jobs, interrupted = asyncio.run(_stored_for(args.db, configs, console)), None
        not_run += len(configs) - len(jobs)
    else:
        jobs, interrupted = asyncio.run(_run_all(args, configs, console))
    rows = asyncio.run(_rows(args.db, plugin, jobs))
    report = _report(rows, refused, folder, not_run)
    if args.report:
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    print_table(Console(), rows, report)
    if interrupted is not None:
        console.print(
            f"interrupted ({interrupted}): run the same command again to continue",
            highlight=False,
            markup=False,
        )
        return SIGNAL_EXIT.get(interrupted, 130)
    failed = [job for job in jobs if job.state is JobState.FAILED]
    return EXIT_FAILED if failed else 0


async def _stored_for(db: str, configs: list[tuple[str, RunConfig]], console: Console) -> list[Job]:
    """Each config's newest job in ``db`` with its problem and seed and a budget of at most its
    own, in their order."""
    from codevolve.program_db import repository
    from codevolve.services.database import reading_session

    async with reading_session(db) as session:  # an existing database: nothing is created
        stored = await repository.list_jobs(session)  # newest first
    jobs = []
    for name, config in configs:
        job = _same_job(stored, config, within_budget=True)
        if job is None:
            console.print(f"{name}: not run", highlight=False)
        else:
            jobs.append(job)
    return jobs


async def _run_all(
    args: argparse.Namespace, configs: list[tuple[str, RunConfig]], console: Console
) -> tuple[list[Job], str | None]:
    """Run each problem's job in turn (reusing or resuming one the database holds)."""
    from codevolve.evaluator_workers.gpu.pinning import embedded_gpus, open_devices
    from codevolve.services.runtime.problems import cached_problem

    jobs: list[Job] = []
    if not configs:
        return jobs, None
    # One device process for the whole set: torch imported and kernels compiled once, not per
    # problem (seconds of GPU time each).
    stages = cached_problem(configs[0][1].problem).stages
    with contextlib.ExitStack() as held:
        gpus = embedded_gpus(stages, args.gpus)
        opened = open_devices(gpus, registry.device_jobs().values())
        devices = [held.enter_context(d) for d in opened]
        return await _run_each(args, configs, console, devices or None)


async def _run_each(
    args: argparse.Namespace,
    configs: list[tuple[str, RunConfig]],
    console: Console,
    devices: list[DeviceProcess] | None,
) -> tuple[list[Job], str | None]:
    from codevolve.services.runtime.embedded import run_embedded

    jobs: list[Job] = []
    stored = await _stored_jobs(args.db)  # read once: the set's own runs add no match
    for index, (name, config) in enumerate(configs, start=1):
        existing = _same_job(stored, config)
        if existing is not None and existing.state is JobState.DONE:
            console.print(f"[{index}/{len(configs)}] {name}: done before (job {existing.id})")
            jobs.append(existing)
            continue
        resume = None
        if existing is not None and existing.state is not JobState.CANCELLED:
            resume = existing.id
        result = await run_embedded(
            db_url=args.db,
            config=None if resume else config,
            resume=resume,
            workers=args.workers,
            gpus=args.gpus,
            devices=devices,
            handle_signals=True,
        )
        job = await _job(args.db, result.job_id)
        jobs.append(job)
        best = result.report.get("best_score")
        shown = "no correct program" if best is None else f"best {best:.3f}x eager"
        console.print(f"[{index}/{len(configs)}] {name}: {shown} (job {result.job_id})")
        if result.interrupted is not None:
            return jobs, result.interrupted
    return jobs, None


async def _stored_jobs(db: str) -> list[Job]:
    """Every job ``db`` holds (created and migrated if new), newest first."""
    from codevolve.program_db import repository
    from codevolve.services.database import database_session

    async with database_session(db) as session:
        return await repository.list_jobs(session)


def _same_job(jobs: list[Job], config: RunConfig, *, within_budget: bool = False) -> Job | None:
    """The first of ``jobs`` (newest first) with the problem, seed and budget of ``config``;
    ``within_budget``: with a budget of at most its own."""
    for job in jobs:
        budget, wanted = job.config.max_proposals, config.max_proposals
        if (
            job.config.problem == config.problem
            and job.config.seed == config.seed
            and (budget <= wanted if within_budget else budget == wanted)
        ):
            return job
    return None


async def _job(db: str, job_id: str) -> Job:
    from codevolve.program_db import repository
    from codevolve.services.database import reading_session

    async with reading_session(db) as session:
        job = await repository.get_job(session, job_id)
    assert job is not None  # the run just wrote it
    return job


async def _rows(db: str, plugin: ProblemPlugin, jobs: list[Job]) -> list[Row]:
    from codevolve.services.database import reading_session
    from codevolve.services.read_models.results import result_rows

    if not jobs:
        return []
    async with reading_session(db) as session:
        return await result_rows(session, plugin, jobs)


def _report(
    rows: list[Row], refused: list[tuple[str, str]], folder: Path, not_run: int
) -> dict[str, Any]:
    """The set's summary; with ``not_run`` files of the folder left out by ``--problems``, also
    the whole folder's, where each of those counts as a problem without a faster program."""
    summary = kernelbench()[2].summary
    report: dict[str, Any] = dict(summary(rows, len(refused)))
    report["folder"] = str(folder)
    report["not_run"] = not_run
    if not_run:
        report["whole_folder"] = summary(rows, len(refused) + not_run)
    report["rows"] = [dict(row) for row in rows]
    report["skipped"] = [{"problem": name, "reason": why} for name, why in refused]
    return report


def print_table(console: Console, rows: list[Row], report: Mapping[str, Any]) -> None:
    table = Table(title="KernelBench problems (speedups of each problem's confirmed best)")
    columns = ("problem", "correct", "vs eager", "vs compile", "best ms", "compile s", "triton")
    for column in (*columns, "job"):
        table.add_column(column, justify="left" if column in ("problem", "job") else "right")
    for row in rows:
        seconds = row.get("compile_seconds")
        table.add_row(
            row["problem"],
            "yes" if row["correct"] else "no",
            _x(row["speedup_eager"]) + (" (ref)" if row["is_reference"] else ""),
            "failed" if row.get("compile_failed") else _x(row["speedup_compile"]),
            "-" if row["best_ms"] is None else f"{row['best_ms']:.4f}",
            ("-" if seconds is None else f"{seconds:.1f}")
            + (" (cached)" if row.get("compile_cached") else ""),
            "yes" if row["uses_triton"] else "",
            row["job_id"],
        )
    console.print(table)
    _print_compile_notes(console, rows, report)
    for against in ("eager", "compile"):
        console.print(f"against {against}: {_fast_p(report[f'fast_p_{against}'])}")
    whole = report.get("whole_folder")
    if whole is not None:
        console.print(
            f"over all {whole['problems']} files of the folder ({report['not_run']} not run, "
            f"counted as not solved), against eager: {_fast_p(whole['fast_p_eager'])}"
        )
    console.print(
        f"{report['problems']} problems, {report['correct']} with a correct program, "
        f"{report['kept_reference']} kept the reference's own code"
        + (f", {len(report['skipped'])} skipped" if report["skipped"] else "")
    )


def _print_compile_notes(console: Console, rows: list[Row], report: Mapping[str, Any]) -> None:
    """Each problem whose torch.compile baseline failed, with why, and the seconds spent
    compiling the baselines (each once per device process; cached ones from the cache)."""
    for row in rows:
        if row.get("compile_failed"):
            console.print(f"{row['problem']}: {row['compile_note']}", highlight=False, markup=False)
    seconds, failed = report.get("compile_seconds"), report.get("compile_failed", 0)
    if seconds is not None or failed:
        console.print(
            f"torch.compile baselines: {'-' if seconds is None else seconds} s compiling, "
            f"{report.get('compile_cached', 0)} from the cache, {failed} failed "
            "(counted as not faster against compile)",
            highlight=False,
        )


def _fast_p(values: dict[str, float | None]) -> str:
    """``fast_0 0.67, fast_1 0.53, ...`` (``-`` where the baseline was not timed)."""
    return ", ".join(
        f"fast_{p.removesuffix('.0')} {'-' if v is None else f'{v:.2f}'}" for p, v in values.items()
    )


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"
