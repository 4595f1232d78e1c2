"""Options are checked before a job is written; a refused one is named as the user typed it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import codevolve, job_rows, sha256


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--proposals", "-5"), "error: --proposals must be at least 1, got -5"),
        (("--proposals", "0"), "error: --proposals must be at least 1, got 0"),
        (("--islands", "0"), "error: --islands must be at least 1, got 0"),
        (("--in-flight", "-1"), "error: --in-flight must be at least 1, got -1"),
        (("--max-wall-s", "0"), "error: --max-wall-s must be more than 0.0, got 0.0"),
        (("--remeasure-samples", "0"), "error: --remeasure-samples must be at least 1, got 0"),
        (("--remeasure-samples", "101"), "error: --remeasure-samples must be at most 100, got 101"),
    ],
)
def test_a_refused_run_option_is_named_as_typed_and_nothing_is_written(
    options: tuple[str, ...], message: str, run_db: tuple[Path, str]
) -> None:
    db, _ = run_db
    before = sha256(db)
    outcome = codevolve("run", "gemm-tiling", *options, "--db", str(db))
    assert outcome.returncode == 2
    assert outcome.error_line == message
    assert "max_proposals" not in outcome.stderr
    assert sha256(db) == before


def test_zero_workers_is_refused_before_a_job_is_queued(tmp_path: Path) -> None:
    outcome = codevolve("run", "gemm-tiling", "--workers", "0", "--db", "w.sqlite", cwd=tmp_path)
    assert outcome.returncode == 2
    assert "--workers: must be at least 1, got 0" in outcome.error_line
    assert list(tmp_path.iterdir()) == []


def test_submit_names_the_option_too(tmp_path: Path) -> None:
    outcome = codevolve(
        "submit", "gemm-tiling", "--proposals", "-5", "--db", "s.sqlite", cwd=tmp_path
    )
    assert outcome.error_line == "error: --proposals must be at least 1, got -5"
    assert list(tmp_path.iterdir()) == []


def test_a_misspelt_problem_gets_the_closest_name(tmp_path: Path) -> None:
    outcome = codevolve("run", "gemm-tilling", "--db", "x.sqlite", cwd=tmp_path)
    assert outcome.returncode == 2
    assert "unknown problem 'gemm-tilling'; did you mean gemm-tiling?" in outcome.error_line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("report", "says"),
    [("missing/report.json", "no folder missing"), (".", "is a folder")],
)
def test_a_report_path_that_cannot_be_written_is_refused_before_the_run(
    report: str, says: str, tmp_path: Path
) -> None:
    outcome = codevolve("run", "gemm-tiling", "--report", report, "--db", "x.sqlite", cwd=tmp_path)
    assert outcome.returncode == 2
    assert f"--report {report}" in outcome.error_line and says in outcome.error_line
    assert list(tmp_path.iterdir()) == []


def test_resuming_an_unknown_job_names_it(run_db: tuple[Path, str]) -> None:
    db, _ = run_db
    before = sha256(db)
    outcome = codevolve("run", "--resume", "nope", "--db", str(db))
    assert outcome.returncode == 2
    assert outcome.error_line.startswith(f"error: --resume nope: no such job in {db}")
    assert sha256(db) == before


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (("matmul-tensor",), "the job's problem is gemm-tiling, not matmul-tensor"),
        (("--seed", "3"), "the job's --seed is 0, not 3"),
        (("--proposals", "500"), "the job's --proposals is 6, not 500"),
        (("--islands", "4"), "the job's --islands is 1, not 4"),
        (
            ("--proposer", "llm", "--model", "m"),
            "--model/--max-cost differ from the job's simulated",
        ),
        (("--problem-dir", "."), "--problem-dir/--config cannot change the problem"),
    ],
)
def test_resume_refuses_an_option_that_contradicts_the_stored_job(
    options: tuple[str, ...], says: str, run_db: tuple[Path, str]
) -> None:
    db, job_id = run_db
    before = sha256(db)
    outcome = codevolve("run", *options, "--resume", job_id, "--db", str(db))
    assert outcome.returncode == 2
    assert outcome.error_line.startswith(f"error: --resume {job_id}: ")
    assert says in outcome.error_line and outcome.error_line.endswith("or start a new job")
    assert sha256(db) == before


def test_resume_accepts_the_stored_values_and_per_process_options(run_db: tuple[Path, str]) -> None:
    db, job_id = run_db
    outcome = codevolve(
        "run", "gemm-tiling", "--seed", "0", "--workers", "1", "--resume", job_id,
        "--db", str(db), "--quiet",
    )  # fmt: skip
    assert outcome.returncode == 0, outcome.stderr
    assert [row[1] for row in job_rows(db)] == ["done"]


def test_a_problem_folder_names_the_option_the_user_typed(tmp_path: Path) -> None:
    folder = Path(__file__).parents[2] / "src/codevolve/problems/examples/function_minimization"
    outcome = codevolve(
        "run", "--problem-dir", str(folder), "--proposals", "0", "--db", "p.sqlite", cwd=tmp_path
    )
    assert outcome.returncode == 2
    assert outcome.error_line == "error: --proposals must be at least 1, got 0"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "99999999999999999999",
            "max_iterations must be at most 10000000, got 99999999999999999999",
        ),
        (".nan", "max_iterations must be a finite number, got nan"),
        (
            "1\nevaluator:\n  cascade_thresholds_reject: 'yes'",
            "evaluator.cascade_thresholds_reject must be true or false, not 'yes'",
        ),
    ],
)
def test_a_problem_folders_config_yaml_is_held_to_the_same_caps(
    tmp_path: Path, value: str, message: str
) -> None:
    example = Path(__file__).parents[2] / "src/codevolve/problems/examples/function_minimization"
    folder = tmp_path / "problem"
    shutil.copytree(example, folder)
    (folder / "config.yaml").write_text(f"max_iterations: {value}\n")
    outcome = codevolve("run", "--problem-dir", str(folder), "--db", "p.sqlite", cwd=tmp_path)
    assert outcome.returncode == 2
    assert outcome.error_line == f"error: config.yaml: {message}"
    assert "Traceback" not in outcome.stderr
    assert not (tmp_path / "p.sqlite").exists()


def test_remeasure_samples_is_stored_with_the_job(tmp_path: Path) -> None:
    outcome = codevolve(
        "submit", "gemm-tiling", "--remeasure-samples", "1", "--json", "--db", "s.sqlite",
        cwd=tmp_path,
    )  # fmt: skip
    assert outcome.returncode == 0, outcome.stderr
    status = codevolve(
        "status", json.loads(outcome.stdout)["job_id"], "--json", "--db", "s.sqlite", cwd=tmp_path
    )
    assert json.loads(status.stdout)["config"]["remeasure_samples"] == 1
