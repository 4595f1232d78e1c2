"""``codevolve run --kernel-problem PATH.py``: a job on one KernelBench-format file.

The file is read and checked here (problems/kernelbench/format.py: ``Model``, ``get_inputs``,
``get_init_inputs``; the rules), never run: only the trusted judge in a device process executes
it. The problem is a bundle of the file, its initial program and the judge's settings
(``bundle:<sha256>``), stored with the job so that ``--resume`` and GPU workers elsewhere find it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from codevolve.core.config import RunConfig
from codevolve.core.errors import ConfigError
from codevolve.problems.kernelbench.spec import JudgeSettings, KernelSpec, make_spec, spec_files
from codevolve.problems.openevolve import make_bundle, problem_of
from codevolve.services.cli import llm as cli_llm
from codevolve.services.cli.options import JOB_KEYS, config_error
from codevolve.services.run_config import RunConfigRefused, bundle_run_config

MAX_FILE_BYTES = 1 << 20


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    """The judge's settings, shared by ``run --kernel-problem`` and ``kernelbench``."""
    defaults = JudgeSettings()
    parser.add_argument(
        "--forbid",
        default="",
        metavar="OPS",
        help="aten operators solutions must not run, comma-separated (e.g. aten.mm,aten.bmm)",
    )
    parser.add_argument(
        "--baselines",
        default=",".join(defaults.baselines),
        help="timed beside each solution: eager, or eager,compile (default: eager,compile)",
    )
    parser.add_argument(
        "--judge-seeds",
        type=int,
        default=defaults.seeds,
        help=f"correctness trials per input distribution ({defaults.seeds})",
    )
    parser.add_argument(
        "--judge-trials",
        type=int,
        default=defaults.trials,
        help=f"timed rounds ({defaults.trials})",
    )


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--kernel-problem", type=Path, metavar="PATH.py", help="a KernelBench-format problem file"
    )
    add_judge_arguments(run)


def judge_settings(args: argparse.Namespace) -> JudgeSettings:
    """The judge's settings as typed; a refused value names its option."""
    forbid = tuple(op.strip() for op in args.forbid.split(",") if op.strip())
    baselines = tuple(b.strip() for b in args.baselines.split(",") if b.strip())
    checks = (
        ("--judge-seeds", args.judge_seeds, "seeds"),
        ("--judge-trials", args.judge_trials, "trials"),
        ("--forbid", args.forbid, "forbid"),
        ("--baselines", args.baselines, "baselines"),
    )
    try:
        return JudgeSettings(
            seeds=args.judge_seeds, trials=args.judge_trials, forbid=forbid, baselines=baselines
        )
    except ConfigError as exc:
        message = str(exc)
        for flag, value, field in checks:
            if message.startswith(field):
                raise ConfigError(f"{flag} {value}: {message}") from exc
        raise


def read_spec(path: Path, settings: JudgeSettings) -> KernelSpec:
    """The problem in ``path`` (ConfigError names the path and the fault)."""
    if path.suffix != ".py":
        raise ConfigError(f"--kernel-problem {path}: expected a .py file in the KernelBench format")
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "no such file"
        raise ConfigError(f"--kernel-problem {path}: {kind}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ConfigError(f"--kernel-problem {path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--kernel-problem {path}: cannot be read as UTF-8 text ({exc})") from exc
    return make_spec(source, name=path.stem, settings=settings)


def kernel_run_config(
    spec: KernelSpec, args: argparse.Namespace, *, fields: dict[str, Any] | None = None
) -> RunConfig:
    """The job config of one kernel problem: its bundle is built and loaded in this process."""
    bundle = make_bundle(spec_files(spec))
    problem_of(bundle)
    keys = {key: value for key in JOB_KEYS if (value := getattr(args, key, None)) is not None}
    given = dict(fields or {})
    proposer = cli_llm.proposer_overrides(args)
    if proposer is not None:
        given["proposer"] = proposer
    try:
        config, _ = bundle_run_config(bundle, keys, fields=given)
    except RunConfigRefused as exc:
        raise config_error(exc) from exc
    return config


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    if args.problem or args.problem_dir is not None:
        raise ConfigError("run: give one of a problem name, --problem-dir or --kernel-problem")
    spec = read_spec(args.kernel_problem, judge_settings(args))
    return kernel_run_config(spec, args, fields={"label": Path(args.kernel_problem).name})
