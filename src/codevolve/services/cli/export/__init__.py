"""``codevolve export JOB [--format F] [--out FILE]``: a job's result as a file a user keeps.

The formats are the problems': each plug-in names its exporters (core/plugin.py), and a job is
exported by those of its problem's plug-in (for an uploaded bundle, of the formats' plug-ins),
its first one by default. An exporter reads the job through :class:`~.best.JobRecords` and
returns the text (a module, or for a data format text and JSON).

Without ``--out`` the result is printed; ``--out`` replaces a file only with ``--force``. A job
of a problem no format exports, a format its problem has not, an unknown job or one with no best
program yet is refused in one ``error:`` line, and nothing is written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from codevolve.core.errors import CodevolveError
from codevolve.core.export import Exported, Exporter, ExportRefused, NotExported
from codevolve.core.job import Job
from codevolve.problems import registry
from codevolve.services.cli.options import db_option


def register(sub: Any) -> None:
    """Add ``export`` to the ``codevolve`` parser's subcommands."""
    export = sub.add_parser(
        "export", help="a job's result: its best program as a module, or the problem's own data"
    )
    export.add_argument("job")
    export.add_argument(
        "--format",
        default=None,
        help="default: the job's own. Each problem names its formats (docs/cli.md): module "
        "(gemm-tiling and gemm-tiling-gpu jobs: choose_config behind a launch guard, and its "
        "test; KernelBench jobs: ModelNew, the reference and a test comparing them), triton "
        "(gemm-kernel-gpu jobs: a module with matmul(a, w) and its test), decompositions "
        "(matmul-tensor jobs)",
    )
    export.add_argument("--json", action="store_true", help="a data format as JSON")
    export.add_argument(
        "--out", type=Path, help="write the file here instead of printing it (data: JSON)"
    )
    export.add_argument("--force", action="store_true", help="let --out replace a file that exists")
    db_option(export)
    export.set_defaults(handler=_cmd_export)


def _cmd_export(args: argparse.Namespace) -> int:
    out: Path | None = args.out
    if out is not None:
        _check_out(out, force=args.force)
    if args.format is not None:
        _check_format(args.format, json_asked=args.json)
    exporter, exported = asyncio.run(_export(args, out))
    if exported.document is not None and (out is not None or args.json):
        text = json.dumps(exported.document, indent=2)
    else:
        text = exported.text
    if out is None:
        print(text.rstrip("\n"))
        return 0
    out.write_text(text.rstrip("\n") + "\n")
    if exporter.is_module:
        sys.stderr.write(f"wrote {out}: check it with `pytest {out}` or `python {out}`\n")
    return 0


def _json_formats() -> list[str]:
    return sorted({e.format for _, e in registry.exporters() if e.json})


def _check_format(format: str, *, json_asked: bool) -> None:
    """Refuse a format no installed problem exports, and --json with a format that has no JSON
    form, before the database is opened."""
    formats = sorted({e.format for _, e in registry.exporters()})
    if format not in formats:
        raise ExportRefused(
            f"--format {format}: no problem exports it; formats: {', '.join(formats)}"
        )
    if json_asked and format not in _json_formats():
        raise ExportRefused(
            f"--json applies to --format {' or '.join(_json_formats())}, not {format}"
        )


def catalogue() -> str:
    """Which jobs each format exports, as refusals name them: "gemm-kernel-gpu jobs (--format
    triton), ..."; formats in the order their first plug-in comes by name."""
    by_format: dict[str, list[str]] = {}
    for plugin, exporter in registry.exporters():
        by_format.setdefault(exporter.format, []).append(plugin.shown)
    parts = []
    for format, names in by_format.items():
        jobs = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        parts.append(f"{jobs} jobs (--format {format})")
    return ", ".join(parts)


def _not_exported(job: Job, format: str | None) -> ExportRefused:
    what = f"has no export as {format}" if format is not None else "has no export"
    return ExportRefused(
        f"job {job.id} is a job of {job.config.problem}, which {what}; `codevolve export` "
        f"exports {catalogue()}; `codevolve best {job.id}` prints its best program"
    )


def _check_out(out: Path, *, force: bool) -> None:
    """Refuse an ``--out`` that cannot be written, or that would replace a file unasked."""
    if out.is_dir():
        raise CodevolveError(f"--out {out} is a folder; name a file, e.g. {out / 'export.json'}")
    if not out.parent.is_dir():
        raise CodevolveError(f"--out {out}: no folder {out.parent}; create it first")
    if out.exists() and not force:
        raise CodevolveError(
            f"--out {out}: the file exists; pass --force to replace it or name another file"
        )


async def _export(args: argparse.Namespace, out: Path | None) -> tuple[Exporter, Exported]:
    from codevolve.services.cli.export.best import JobRecords, get_job
    from codevolve.services.database import reading_session

    async with reading_session(args.db) as session:
        job = await get_job(session, args.job)
        serving = [e for p in registry.serving(job.config.problem) for e in p.exporters]
        asked = args.format
        if args.format is None and serving:
            args.format = serving[0].format
            if args.json and not serving[0].json:
                raise ExportRefused(
                    f"--json applies to --format {' or '.join(_json_formats())}; job {job.id} "
                    f"exports as --format {args.format}"
                )
        exporters = [e for e in serving if e.format == args.format]
        if not exporters:
            raise _not_exported(job, asked)
        records = JobRecords(session, job)
        for exporter in exporters:
            file = str(out) if out is not None else exporter.default_file
            try:
                return exporter, await exporter.export(records, file)
            except NotExported:
                continue  # a format plug-in's exporter for files of another format
    raise _not_exported(job, asked)
