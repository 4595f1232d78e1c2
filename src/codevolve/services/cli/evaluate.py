"""``codevolve evaluate``: run one program through its problem's cascade, here.

The problem is named as ``codevolve run`` names it: a built-in name (``--problem``), a folder
in the OpenEvolve layout (``--problem-dir DIR [--config FILE]``) or a format plug-in's problem
file (``--kernel-problem FILE``: cli/problem_file.py); it is built by the same functions as a
run's and looked up the way the run's workers look it up. The program (by default the
problem's initial program) runs in the sandbox the workers use, and a device stage in a device
process as ``run --gpus`` opens it; nothing is written to a database. A problem whose plug-in
has a per-case report (core/plugin.py: CaseReport) adds it, on the cases of ``--shapes FILE``
or on its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from codevolve.core.codec import stage_to_dict
from codevolve.core.config import RunConfig
from codevolve.core.device import GPU, needed_capabilities
from codevolve.core.errors import ConfigError
from codevolve.core.plugin import CaseReport
from codevolve.core.problem import Problem
from codevolve.core.program import ProgramStatus
from codevolve.core.task import Task
from codevolve.evaluator_workers.cascade import SandboxedCandidate, run_cascade
from codevolve.evaluator_workers.gpu.pinning import open_devices
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.problems import registry
from codevolve.problems.errors import ProblemError
from codevolve.services.cli import problem_dir, problem_file
from codevolve.services.cli.options import EXIT_FAILED, cache_dir_option, check_problem
from codevolve.services.cli.summaries import print_evaluation
from codevolve.services.runtime.embedded import problem_gpus
from codevolve.services.runtime.problems import cached_problem

INITIAL = "the initial program"  # what the record names when --program is not given
SOURCES = ("--problem", "--problem-dir")  # and each format plug-in's file option


def register(sub: Any) -> None:
    evaluate = sub.add_parser(
        "evaluate",
        help="score one program file (default: the problem's initial program)",
        description="Run one program through the problem's cascade here and print each stage's "
        "verdict and metrics; exit 1 when it fails. Name the problem as `codevolve run` does.",
    )
    evaluate.add_argument("--problem", help="a built-in problem's name, e.g. gemm-tiling")
    problem_dir.add_run_arguments(evaluate)
    problem_file.add_run_arguments(evaluate)
    evaluate.add_argument(
        "--program", type=Path, help="the program file (default: the problem's initial program)"
    )
    evaluate.add_argument("--seed", type=int, default=None, help="seed of the inputs drawn (0)")
    evaluate.add_argument(
        "--gpus", default=None, help="device stages: an id, or cpu (default: one GPU), as in run"
    )
    evaluate.add_argument(
        "--shapes",
        type=Path,
        help="the cases of the problem's per-case report, a JSON file (gemm-tiling: a list of "
        "[M, N, K])",
    )
    evaluate.add_argument("--json", action="store_true", help="print the full record as JSON")
    cache_dir_option(evaluate)
    # The job config is built by run's own functions; the proposer is not used here.
    evaluate.set_defaults(handler=_cmd_evaluate, db=None, proposer=None, model=[], max_cost=None)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    """Exit 0 when the program passes the cascade, EXIT_FAILED when it fails or is rejected."""
    config, warnings = problem_config(args)
    console = Console(stderr=True)
    for warning in warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False, soft_wrap=True)
    result = evaluate_program(config, program=args.program, shapes=args.shapes, gpus=args.gpus)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report = case_report(config.problem)
        lines = () if report is None else report.lines(result)
        print_evaluation(Console(highlight=False, soft_wrap=True), result, lines)
    return 0 if result["status"] == ProgramStatus.EVALUATED.value else EXIT_FAILED


def problem_config(args: argparse.Namespace) -> tuple[RunConfig, tuple[str, ...]]:
    """The job config ``run`` would build from the same options, and the warnings that matter
    to one evaluation: files left out of a folder's bundle (the evaluator may need one), not
    the config's keys of a run."""
    files = problem_file.formats()
    sources = [*SOURCES, *(file.option for file in files)]
    values = (args.problem, args.problem_dir, *(getattr(args, file.dest) for file in files))
    given = [
        (flag, value) for flag, value in zip(sources, values, strict=True) if value is not None
    ]
    if not given:
        usages = ["--problem NAME (e.g. gemm-tiling)", "--problem-dir PATH"]
        usages += [file.usage for file in files]
        raise ConfigError(f"evaluate: name the problem: {problem_file.one_of(usages)}")
    if len(given) > 1:
        flags = " and ".join(flag for flag, _ in given)
        raise ConfigError(f"evaluate: give one of {', '.join(sources)}, not {flags}")
    if args.config is not None and args.problem_dir is None:
        raise ConfigError(
            "evaluate: --config goes with --problem-dir; drop it or add --problem-dir"
        )
    if args.shapes is not None and (args.problem is None or case_report(args.problem) is None):
        named = args.problem or " ".join(str(part) for part in given[0])
        reporting = [p.name for p in registry.plugins().values() if p.case_report is not None]
        raise ConfigError(f"--shapes applies to {', '.join(reporting)} only, not {named}")
    if args.problem_dir is not None:
        folder = problem_dir.run_config_from_args(args)
        return folder.config, () if folder.left_out is None else (folder.left_out,)
    if chosen := problem_file.given(args):
        return problem_file.run_config_from_args(args, chosen[0]), ()
    check_problem(args.problem)
    return RunConfig(problem=args.problem, seed=args.seed or 0), ()


def evaluate_program(
    config: RunConfig, *, program: Path | None, shapes: Path | None = None, gpus: str | None = None
) -> dict[str, Any]:
    """The cascade's verdict on ``program`` (None: the problem's initial program, judged as a
    run judges it: a threshold only stops its cascade), and its per-case report when the
    problem's plug-in has one.

    Inputs that cannot be used raise ConfigError naming the option; a program that fails is a
    verdict (``status``), not an error."""
    problem = cached_problem(config.problem)  # the lookup every worker of a run makes
    report = case_report(config.problem)
    source = problem.initial_program if program is None else _read_program(program)
    cases = read_cases(shapes, report) if shapes is not None and report is not None else None
    gpu_ids = problem_gpus(problem, gpus) if _needs_device(problem) else []
    with SandboxPool(size=1) as pool, contextlib.ExitStack() as held:
        opened = open_devices(gpu_ids, registry.device_jobs().values())
        devices = [held.enter_context(device) for device in opened]
        task = Task(
            program_id="file",
            job_id="-",
            problem=config.problem,
            source=source,
            seed=config.seed,
            limits=config.sandbox,
            initial=program is None,
            # judged as a would-be best is confirmed: a problem that times its held-out cases
            # only then times them here too
            remeasure=1,
        )
        evaluation = run_cascade(
            problem, task, pool, worker="cli", device=devices[0] if devices else None
        )
        result: dict[str, Any] = {
            "problem": config.label or config.problem,
            "program": INITIAL if program is None else str(program),
            "status": evaluation.status.value,
            "score": evaluation.score,
            "error": evaluation.error,
            "stages": [stage_to_dict(s) for s in evaluation.stages],
        }
        if report is not None:
            candidate = SandboxedCandidate(source, limits=config.sandbox, pool=pool)
            result.update(report.report(candidate, cases))
    return result


def case_report(problem: str) -> CaseReport | None:
    """The per-case report of the problem's plug-in; None for a problem without one (and for a
    name no plug-in serves)."""
    plugin = registry.plugins().get(problem)
    return None if plugin is None else plugin.case_report


def _needs_device(problem: Problem) -> bool:
    return GPU in needed_capabilities(problem.stages)


def _read_program(program: Path) -> str:
    if not program.is_file():
        kind = "a folder, not a file" if program.is_dir() else "no such file"
        raise ConfigError(f"--program {program}: {kind}")
    try:
        return program.read_text()
    except UnicodeDecodeError:
        raise ConfigError(f"--program {program}: not a text (UTF-8) file") from None


def read_cases(path: Path, report: CaseReport) -> Sequence[Any]:
    """The cases of a ``--shapes`` file, as the problem's report reads its JSON."""
    if not path.is_file():
        raise ConfigError(f"--shapes {path}: no such file")
    try:
        data = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise ConfigError(f"--shapes {path}: not a text file of JSON") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--shapes {path}: not JSON ({exc.msg}, line {exc.lineno}); "
            f"expected {report.expects}, e.g. {report.example}"
        ) from None
    try:
        return report.parse(data)
    except ProblemError as exc:
        raise ConfigError(f"--shapes {path}: {exc}, e.g. {report.example}") from None
