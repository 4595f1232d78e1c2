"""Help that reads as plain text and says the one --db default; submit's hint; a progress bar
that fits 80 columns without cutting its numbers."""

from __future__ import annotations

import io
import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from codevolve.core.config import RunConfig
from codevolve.core.job import Job, JobState
from codevolve.services.cli.run import ProgressBar
from codevolve.services.controller.loop import Progress
from tests.cli.conftest import codevolve, job_rows

DB_DEFAULT = "(default: $CODEVOLVE_DB, else ./codevolve.sqlite)"


def test_top_level_help_is_plain_text() -> None:
    outcome = codevolve("--help")
    assert outcome.returncode == 0
    assert "``" not in outcome.stdout
    assert "codevolve run gemm-tiling" in outcome.stdout
    assert "Exit codes: 0" in outcome.stdout


@pytest.mark.parametrize(
    "command",
    [("run",), ("submit",), ("serve",), ("status",), ("best",), ("export",), ("token", "list")],
    ids=" ".join,
)
def test_every_db_option_states_the_same_default(command: tuple[str, ...]) -> None:
    outcome = codevolve(*command, "--help")
    assert " ".join(DB_DEFAULT.split()) in " ".join(outcome.stdout.split())


def test_submit_says_on_stderr_that_a_server_must_run(tmp_path: Path) -> None:
    outcome = codevolve(
        "submit", "gemm-tiling", "--proposals", "5", "--db", "q.sqlite", "--json", cwd=tmp_path
    )
    assert outcome.returncode == 0, outcome.stderr
    job = json.loads(outcome.stdout)
    assert job["state"] == "queued"
    assert f"job {job['job_id']} is queued: a running `codevolve serve --db q.sqlite` runs it" in (
        outcome.stderr
    )
    assert [row[1] for row in job_rows(tmp_path / "q.sqlite")] == ["queued"]


@pytest.mark.parametrize("width", [60, 72, 80, 99, 120])
def test_the_progress_bar_fits_the_terminal_without_cutting_numbers(width: int) -> None:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=True, color_system=None)
    bar = ProgressBar(console, enabled=True)
    config = RunConfig(problem="gemm-tiling", max_proposals=100000)
    job = Job(id="j", config=config, state=JobState.RUNNING, created_at=datetime.now(UTC))
    bar.start(job)
    progress = Progress(max_proposals=100000, started=time.monotonic() - 3600)
    progress.proposals = 77777
    progress.failed, progress.rejected, progress.best_score = 12345, 23456, 1.23456
    bar.update(progress)
    console.print(bar.table())
    (line,) = [line for line in out.getvalue().splitlines() if "77777" in line]
    assert len(line.rstrip()) <= width
    for text in ("77777/100000", "12345", "23456", "1.2346"):
        assert text in line


def test_status_without_json_is_a_short_summary(run_db: tuple[Path, str]) -> None:
    db, job_id = run_db
    outcome = codevolve("status", job_id, "--db", str(db))
    assert outcome.returncode == 0
    lines = outcome.stdout.splitlines()
    assert lines[0] == f"job {job_id} (gemm-tiling): done"
    assert len(lines) <= 6 and "max_in_flight" not in outcome.stdout
    assert any(line.startswith("  best: ") for line in lines)


def test_status_of_a_job_stopped_before_its_best_was_confirmed(run_db: tuple[Path, str]) -> None:
    """Evaluated programs but no confirmed best (a run stopped during the re-measure): the
    summary says the best awaits confirmation instead of "none evaluated yet"."""
    db, job_id = run_db
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE jobs SET best_program_id = NULL, best_score = NULL")
    samples = json.loads(codevolve("status", job_id, "--db", str(db), "--json").stdout)[
        "remeasure_samples"
    ]
    outcome = codevolve("status", job_id, "--db", str(db))
    assert outcome.returncode == 0, outcome.stderr
    (line,) = [line for line in outcome.stdout.splitlines() if line.startswith("  best: ")]
    assert line == (
        f"  best: none confirmed yet (a would-be best is re-measured on {samples} fresh samples "
        "first)"
    )
