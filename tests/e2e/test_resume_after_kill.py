"""SIGKILL a run mid-way; --resume finishes it without losing or re-evaluating anything."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROPOSALS = 120  # killed past 60 evaluated; the resume makes the rest


def _evaluated(db: Path) -> dict[str, tuple[str, int]]:
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            rows = conn.execute(
                "select id, evaluated_at, attempts from programs where status != 'pending'"
            ).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return {}
    return {row[0]: (row[1], row[2]) for row in rows}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "codevolve.services.cli", *args]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_run_resumes_without_losing_or_reevaluating_programs(tmp_path: Path) -> None:
    db = tmp_path / "kill.sqlite"
    log = tmp_path / "first-run.log"
    with log.open("wb") as stderr:
        run = subprocess.Popen(
            _cli(
                "run",
                "gemm-tiling",
                "--proposals",
                str(PROPOSALS),
                "--seed",
                "5",
                "--db",
                str(db),
                "--quiet",
            ),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            deadline = time.monotonic() + 120
            while len(_evaluated(db)) < 60:
                assert run.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the run made no progress"
                time.sleep(0.2)
        finally:
            os.killpg(run.pid, signal.SIGKILL)  # the controller, its workers, sandbox children
            run.wait()

    before = _evaluated(db)
    with sqlite3.connect(db) as conn:
        (job_id,) = conn.execute("select id from jobs").fetchone()
        (state,) = conn.execute("select state from jobs").fetchone()
        (made,) = conn.execute("select count(*) from proposals").fetchone()
    assert state == "running" and 0 < made < PROPOSALS

    report_path = tmp_path / "report.json"
    resumed = subprocess.run(
        _cli("run", "--resume", job_id, "--db", str(db), "--report", str(report_path), "--quiet"),
        capture_output=True,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    report = json.loads(report_path.read_text())
    assert report["state"] == "done"
    assert report["proposals"] == PROPOSALS
    assert report["pending"] == 0

    after = _evaluated(db)
    for program_id, (evaluated_at, attempts) in before.items():
        assert after[program_id] == (evaluated_at, attempts), "an evaluated program changed"
    with sqlite3.connect(db) as conn:
        (indices,) = conn.execute("select count(distinct proposal_index) from proposals").fetchone()
        (retried,) = conn.execute("select count(*) from programs where attempts > 1").fetchone()
    assert indices == PROPOSALS  # nothing recorded twice
    assert retried <= 8  # only what was pending at the kill (at most max_in_flight) ran again
