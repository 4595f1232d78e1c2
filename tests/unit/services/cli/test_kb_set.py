"""``codevolve kernelbench``: the job a set continues (the newest of the same problem) and the
whole folder's figures when ``--problems`` leaves files out."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rich.console import Console

from codevolve.core.config import RunConfig
from codevolve.core.results import Row
from codevolve.problems.kernelbench.results import KernelRow
from codevolve.services.cli.kernelbench import _report, _same_job, print_table


def _job(name: str, **config: Any) -> Any:
    return SimpleNamespace(id=name, config=RunConfig(**config))


def test_the_newest_matching_job_is_continued_and_other_budgets_are_not() -> None:
    config = RunConfig(problem="bundle:a", seed=0, max_proposals=8)
    stored = [  # newest first, as repository.list_jobs returns them
        _job("other budget", problem="bundle:a", seed=0, max_proposals=9),
        _job("newer", problem="bundle:a", seed=0, max_proposals=8),
        _job("older", problem="bundle:a", seed=0, max_proposals=8),
        _job("other problem", problem="bundle:b", seed=0, max_proposals=8),
    ]
    found = _same_job(stored, config)
    assert found is not None and found.id == "newer"
    assert _same_job(stored[3:], config) is None


def _row(problem: str, speedup: float | None, *, reference: bool = False, **more: Any) -> Row:
    return KernelRow(
        problem=problem,
        job_id=problem,
        state="done",
        proposals=4,
        correct=speedup is not None,
        is_reference=reference,
        speedup_eager=speedup,
        best_ms=None,
        eager_ms=None,
        compile_ms=None,
        uses_triton=False,
        best_program_id=None,
        **{"speedup_compile": None, **more},
    ).as_dict()


def test_files_left_out_by_problems_count_as_not_solved_in_the_whole_folder_figures() -> None:
    rows = [_row("1_a", 2.5), _row("2_b", 1.2), _row("3_c", 1.1, reference=True), _row("4_d", None)]
    report = _report(rows, [("5_e", "not in the format")], Path("level1"), not_run=5)
    assert report["problems"] == 5  # the run set: four rows and one refused file
    assert report["fast_p_eager"]["1.0"] == 2 / 5
    whole = report["whole_folder"]
    assert whole["problems"] == 10
    assert whole["fast_p_eager"] == {"0.0": 3 / 10, "1.0": 2 / 10, "1.5": 1 / 10, "2.0": 1 / 10}
    assert "whole_folder" not in _report(rows, [], Path("level1"), not_run=0)


def test_the_table_ends_with_fast_p_for_the_set_and_for_the_whole_folder() -> None:
    rows = [_row("1_a", 2.5), _row("2_b", None)]
    report = _report(rows, [], Path("level1"), not_run=2)
    out = io.StringIO()
    print_table(Console(file=out, width=200), rows, report)
    text = out.getvalue()
    assert "against eager: fast_0 0.50, fast_1 0.50, fast_1.5 0.50, fast_2 0.50" in text
    assert "against compile: fast_0 -, fast_1 -" in text
    assert (
        "over all 4 files of the folder (2 not run, counted as not solved), against eager: "
        "fast_0 0.25, fast_1 0.25, fast_1.5 0.25, fast_2 0.25"
    ) in text


def test_the_table_shows_compile_seconds_and_says_why_a_compile_baseline_failed() -> None:
    note = "compile baseline failed: compiling Model raised AssertionError: no compile"
    rows = [
        _row("1_a", 2.5, speedup_compile=1.25, compile_seconds=31.26),
        _row("2_b", 1.5, speedup_compile=1.1, compile_seconds=2.0, compile_cached=True),
        _row("3_c", 3.0, compile_failed=True, compile_note=note),
    ]
    report = _report(rows, [], Path("level1"), not_run=0)
    out = io.StringIO()
    print_table(Console(file=out, width=200), rows, report)
    text = out.getvalue()
    assert "31.3" in text and "2.0 (cached)" in text and "failed" in text
    assert f"3_c: {note}" in text
    assert (
        "torch.compile baselines: 33.3 s compiling, 1 from the cache, 1 failed "
        "(counted as not faster against compile)"
    ) in text
    assert "against compile: fast_0 1.00, fast_1 0.67, fast_1.5 0.00, fast_2 0.00" in text
    assert report["compile_seconds"] == 33.3 and report["compile_failed"] == 1
