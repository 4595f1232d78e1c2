"""What users type for KernelBench problems: every mistake ends in one line, exit 2, no job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import codevolve, job_rows
from tests.kernelbench_programs import SWISH


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    path = tmp_path / "25_Swish.py"
    path.write_text(SWISH)
    return path


def _refused(*args: str, db: Path) -> str:
    outcome = codevolve(*args, "--db", str(db))
    assert outcome.returncode == 2, outcome.stderr
    if db.exists():
        assert job_rows(db) == []  # nothing was written
    return outcome.error_line


def test_run_names_a_missing_file_a_folder_and_a_file_of_another_kind(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    missing = tmp_path / "nope.py"
    assert _refused("run", "--kernel-problem", str(missing), db=db) == (
        f"error: --kernel-problem {missing}: no such file"
    )
    folder = tmp_path / "dir.py"
    folder.mkdir()
    assert "a folder" in _refused("run", "--kernel-problem", str(folder), db=db)
    text = tmp_path / "problem.txt"
    text.write_text(SWISH)
    assert ".py file" in _refused("run", "--kernel-problem", str(text), db=db)


def test_run_names_a_file_not_in_the_kernelbench_format(tmp_path: Path) -> None:
    bad = tmp_path / "3_bad.py"
    bad.write_text(SWISH.replace("def get_inputs", "def inputs"))
    line = _refused("run", "--kernel-problem", str(bad), db=tmp_path / "db.sqlite")
    assert line.startswith("error: 3_bad") and "get_inputs" in line


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (("--forbid", "mm"), "--forbid mm"),
        (("--judge-seeds", "0"), "--judge-seeds 0"),
        (("--judge-trials", "1"), "--judge-trials 1"),
        (("--baselines", "compile"), "--baselines compile"),
        (("--proposals", "0"), "--proposals"),
    ],
)
def test_run_names_a_refused_judge_option_as_typed(
    problem: Path, tmp_path: Path, options: tuple[str, ...], expected: str
) -> None:
    line = _refused("run", "--kernel-problem", str(problem), *options, db=tmp_path / "db.sqlite")
    assert expected in line


def test_run_takes_one_problem_source(problem: Path, tmp_path: Path) -> None:
    line = _refused("run", "gemm-tiling", "--kernel-problem", str(problem), db=tmp_path / "d")
    assert "--kernel-problem" in line


def test_kernelbench_names_a_missing_folder_level_or_a_bad_range(
    problem: Path, tmp_path: Path
) -> None:
    db = tmp_path / "db.sqlite"
    nowhere = tmp_path / "nowhere"
    assert _refused("kernelbench", "--dir", str(nowhere), db=db) == (
        f"error: --dir {nowhere}: no such folder"
    )
    line = _refused("kernelbench", "--dir", str(tmp_path), "--level", "3", db=db)
    assert "level3" in line
    line = _refused("kernelbench", "--dir", str(tmp_path), "--problems", "9-2", db=db)
    assert "runs backwards" in line
    line = _refused("kernelbench", "--dir", str(tmp_path), "--problems", "one", db=db)
    assert "'one'" in line
    line = _refused("kernelbench", "--dir", str(tmp_path), "--problems", "40", db=db)
    assert "no KernelBench problem files" in line


def test_a_problem_whose_judge_needs_a_gpu_is_refused_before_a_job_when_there_is_none(
    problem: Path, tmp_path: Path
) -> None:
    line = _refused(
        "run", "--kernel-problem", str(problem), "--gpus", "none", db=tmp_path / "db.sqlite"
    )
    assert line == "error: 25_Swish: its cascade needs a GPU and this run has none (--gpus none)"


def test_kernelbench_report_only_names_a_database_that_is_not_there(
    problem: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.sqlite"
    outcome = codevolve(
        "kernelbench", "--dir", str(tmp_path), "--report-only", "--db", str(missing)
    )
    assert outcome.returncode == 2, outcome.stderr
    assert str(missing) in outcome.error_line
    assert not missing.exists()  # a report creates nothing
