"""``codevolve export JOB [--format F] [--out FILE]``: a job's result as a file a user keeps.

- ``decompositions`` (the default; matmul-tensor jobs): the best verified decomposition of every
  size, as text, or JSON with ``--json`` or ``--out`` (decompositions.py);
- ``triton`` (gemm-kernel-gpu jobs): the best program as a standalone Python module with
  ``matmul(a, w)`` and its own test against ``torch.matmul`` (triton_module.py);
- ``module``: KernelBench jobs, the best ``ModelNew`` with the problem's reference and a test
  comparing the two (kernelbench_module.py); gemm-tiling and gemm-tiling-gpu jobs, the best
  ``choose_config`` behind a launch guard that falls back to the expert's config, with its test
  (tiling_module.py).

Without ``--out`` the result is printed; ``--out`` replaces a file only with ``--force``. A job
of a problem no format exports, a job of another problem, an unknown job or one with no
best program yet is refused in one ``error:`` line, and nothing is written (errors.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from codevolve.core.errors import CodevolveError
from codevolve.services.cli.options import db_option

DECOMPOSITIONS, TRITON, MODULE = "decompositions", "triton", "module"
FORMATS = (DECOMPOSITIONS, TRITON, MODULE)
DEFAULT_FILES = {TRITON: "gemm_kernel.py", MODULE: "model_new.py"}  # named in a printed module


def register(sub: Any) -> None:
    """Add ``export`` to the ``codevolve`` parser's subcommands."""
    export = sub.add_parser(
        "export", help="a job's result: verified decompositions, or its best kernel as a module"
    )
    export.add_argument("job")
    export.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="default: the job's own (decompositions for matmul-tensor, triton for "
        "gemm-kernel-gpu, module for the rest that export). decompositions (matmul-tensor "
        "jobs); triton (gemm-kernel-gpu jobs: a "
        "module with matmul(a, w) and its test); module (KernelBench jobs: ModelNew, the "
        "reference and a test comparing them; gemm-tiling and gemm-tiling-gpu jobs: "
        "choose_config behind a launch guard, and its test)",
    )
    export.add_argument("--json", action="store_true", help="decompositions as JSON")
    export.add_argument(
        "--out", type=Path, help="write the file here instead of printing it (decompositions: JSON)"
    )
    export.add_argument("--force", action="store_true", help="let --out replace a file that exists")
    db_option(export)
    export.set_defaults(handler=_cmd_export)


def _cmd_export(args: argparse.Namespace) -> int:
    from codevolve.services.cli.export.errors import ExportRefused

    out: Path | None = args.out
    if out is not None:
        _check_out(out, force=args.force)
    if args.json and args.format not in (None, DECOMPOSITIONS):
        raise ExportRefused(f"--json applies to --format {DECOMPOSITIONS}, not {args.format}")
    text = asyncio.run(_export(args, out))
    if out is None:
        print(text.rstrip("\n"))
        return 0
    out.write_text(text.rstrip("\n") + "\n")
    if args.format != DECOMPOSITIONS:  # resolved by _export where it was left to the job
        sys.stderr.write(f"wrote {out}: check it with `pytest {out}` or `python {out}`\n")
    return 0


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


def _default_format(problem: str) -> str:
    """The format of a job's own export: decompositions for matmul-tensor (and for a problem
    with none, which then says so), triton for gemm-kernel-gpu, module for the rest."""
    from codevolve.services.cli.export import tiling_module

    if problem == "gemm-kernel-gpu":
        return TRITON
    if problem in tiling_module.PROBLEMS or problem.startswith("bundle:"):
        return MODULE
    return DECOMPOSITIONS


async def _export(args: argparse.Namespace, out: Path | None) -> str:
    from codevolve.services.cli.export.errors import ExportRefused
    from codevolve.services.database import reading_session

    named = str(out) if out is not None else None
    async with reading_session(args.db) as session:
        if args.format is None:
            from codevolve.services.cli.export.best import get_job

            args.format = _default_format((await get_job(session, args.job)).config.problem)
            if args.json and args.format != DECOMPOSITIONS:
                raise ExportRefused(
                    f"--json applies to --format {DECOMPOSITIONS}; job {args.job} exports as "
                    f"--format {args.format}"
                )
        if args.format == TRITON:
            from codevolve.services.cli.export.triton_module import export_triton

            module = Path(named or DEFAULT_FILES[TRITON]).stem
            return await export_triton(session, args.job, module=module)
        if args.format == MODULE:
            from codevolve.services.cli.export import tiling_module
            from codevolve.services.cli.export.best import get_job

            job = await get_job(session, args.job)
            if job.config.problem in tiling_module.PROBLEMS:
                module = Path(named or tiling_module.DEFAULT_FILE).stem
                return await tiling_module.export_tiling(session, job, module=module)
            from codevolve.services.cli.export.kernelbench_module import export_model

            return await export_model(session, args.job, file=named or DEFAULT_FILES[MODULE])
        from codevolve.services.cli.export.decompositions import as_text, collect

        document = await collect(session, args.job)
    if out is not None or args.json:
        return json.dumps(document, indent=2)
    return as_text(document)
