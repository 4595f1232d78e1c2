"""KernelBench-format problems: a user's PyTorch Model file, a ModelNew evolved against it.

The plug-in is a format: its problems are the files users bring (``run --kernel-problem``,
``codevolve kernelbench``), stored as bundles, so it names no problem to run. It reads those
files (``problem_file``), gives their jobs the judge's device job (which runs on a CPU too), the
export of the best ``ModelNew`` with its reference and a test comparing the two, and the results
page of one row per problem with fast_p over them (``results``; results.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from codevolve.core.export import Exported, Exporter, ExportRecords
from codevolve.core.plugin import DeviceJob, ProblemPlugin
from codevolve.core.problem_file import FileSetting, ProblemFile
from codevolve.core.results import Column, Grid, JobResults, ResultsPage, Row
from codevolve.problems.kernelbench.defaults import (
    FAST_P,
    JUDGE_BASELINES,
    JUDGE_SEEDS,
    JUDGE_TRIALS,
)

NAME = "kernelbench"


async def _export(records: ExportRecords, file: str) -> Exported:
    from codevolve.problems.kernelbench.export import export_model

    return await export_model(records, file)


def _settings(values: Mapping[str, int | str]) -> Any:
    from codevolve.problems.kernelbench.spec import settings_of

    return settings_of(values)


def _read(source: str, name: str, settings: Any) -> Mapping[str, bytes]:
    from codevolve.problems.kernelbench.spec import bundle_of_file

    return bundle_of_file(source, name, settings)


async def _row(records: JobResults) -> Row | None:
    from codevolve.problems.kernelbench.results import page_row

    return await page_row(records)


def _summary(rows: Sequence[Row], unsolved: int) -> Mapping[str, Any]:
    from codevolve.problems.kernelbench.results import page_summary

    return page_summary(rows, unsolved)


_BASELINES_TEXT = ",".join(JUDGE_BASELINES)

PROBLEM_FILE = ProblemFile(
    option="--kernel-problem",
    suffix=".py",
    help="a KernelBench-format problem file",
    format="the KernelBench format",
    settings=_settings,
    read=_read,
    options=(
        FileSetting(
            "forbid",
            "--forbid",
            "aten operators solutions must not run, comma-separated (e.g. aten.mm,aten.bmm)",
            default="",
            metavar="OPS",
        ),
        FileSetting(
            "baselines",
            "--baselines",
            f"timed beside each solution: eager, or eager,compile (default: {_BASELINES_TEXT})",
            default=_BASELINES_TEXT,
        ),
        FileSetting(
            "seeds",
            "--judge-seeds",
            f"correctness trials per input distribution ({JUDGE_SEEDS})",
            default=JUDGE_SEEDS,
        ),
        FileSetting(
            "trials", "--judge-trials", f"timed rounds ({JUDGE_TRIALS})", default=JUDGE_TRIALS
        ),
    ),
)

RESULTS = ResultsPage(
    segment="kernelbench",
    title="KernelBench",
    subtitle="each problem's confirmed best against PyTorch eager and torch.compile",
    key="problem",
    row=_row,
    summary=_summary,
    columns=(
        Column("problem", "Problem"),
        Column("correct", "Correct", "yes_no"),
        Column("speedup_eager", "vs eager", "times", flag="is_reference", note="(ref)"),
        Column(
            "speedup_compile", "vs compile", "times", flag="compile_failed", note="(compile failed)"
        ),
        Column("best_ms", "Best ms", "number", digits=4),
        Column(
            "compile_seconds",
            "Compile s",
            "number",
            digits=1,
            flag="compile_cached",
            note="(cached)",
        ),
        Column("uses_triton", "Triton", "tag"),
        Column("state", "State", "state"),
        Column("job_id", "Job", "job"),
    ),
    grid=Grid(
        title="fast_p",
        note="share of problems correct and more than p times faster",
        corner="Against",
        lines=(("fast_p_eager", "PyTorch eager"), ("fast_p_compile", "torch.compile")),
        columns=tuple((p, f"fast_{p.removesuffix('.0')}") for p in FAST_P),
    ),
    counts=(
        "{problems} problem{problems|s}, {correct} with a correct program, "
        "{kept_reference} kept the reference's own code"
    ),
    empty="No KernelBench job yet. Run `codevolve kernelbench --dir …`.",
    hidden=("best_source",),
    description=(
        "Your KernelBench jobs (every owner's for the admin), newest first, each with its "
        "confirmed speedup over eager and `torch.compile`, the seconds its device process spent "
        "compiling the `torch.compile` baseline (`compile_seconds`, `compile_cached` when "
        "Inductor's cache held it) or why that failed (`compile_note`); a problem run more than "
        "once shows its newest job only. `summary` gives fast_p for p in 0, 1, 1.5 and 2 over "
        "those rows (a problem whose compile failed counts as not faster against compile), "
        "`compile_failed`, `compile_cached` and the total `compile_seconds`. Jobs of other "
        "problems are not listed."
    ),
)

PLUGIN = ProblemPlugin(
    name=NAME,
    label="KernelBench",
    device_jobs=(DeviceJob("kb.judge", f"{__name__}.device.kb_jobs:judge_job", cpu=True),),
    exporters=(Exporter("module", _export, default_file="model_new.py"),),
    problem_file=PROBLEM_FILE,
    results=RESULTS,
)
