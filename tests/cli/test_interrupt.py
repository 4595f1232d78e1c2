"""Ctrl-C (SIGINT to the process group, as a terminal sends it) or SIGTERM mid-run: the job is
marked paused with the signal named, the exact resume command is printed, and it resumes. A
SIGTERM sent twice at once (GNU timeout signals the command, then its process group) is one."""

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

from tests.cli.conftest import codevolve

PROPOSALS = 40  # the run is stopped past 10; the resume makes the rest


def _proposals(db: Path) -> int:
    if not db.exists():  # (connecting would create it)
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as connection:
            row = connection.execute("SELECT proposals FROM jobs").fetchone()
    except sqlite3.OperationalError:  # not created yet
        return 0
    return 0 if row is None else int(row[0])


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("number", "code", "times"),
    [(signal.SIGINT, 130, 1), (signal.SIGTERM, 143, 1), (signal.SIGTERM, 143, 2)],
)
def test_an_interrupted_run_is_paused_and_resumes_to_the_end(
    number: signal.Signals, code: int, times: int, tmp_path: Path
) -> None:
    command = ["run", "gemm-tiling", "--proposals", str(PROPOSALS), "--db", "run.sqlite"]
    db = tmp_path / "run.sqlite"
    run = subprocess.Popen(
        [sys.executable, "-m", "codevolve.services.cli", *command, "--quiet"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while _proposals(db) < 10:
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.1)
        if number == signal.SIGINT:
            os.killpg(run.pid, number)  # the whole group, as a terminal's Ctrl-C
        else:
            for _ in range(times):  # back to back, as GNU timeout sends them
                run.send_signal(number)
        _out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()

    # A repeat that lands after the run, while the interpreter shuts down, ends the process as
    # the signal's default does: the same status 143 in a shell.
    assert run.returncode == code or (times > 1 and run.returncode == -number), err
    assert "Traceback" not in err
    with sqlite3.connect(db) as connection:
        ((job_id,),) = connection.execute("SELECT id FROM jobs").fetchall()
    resume = f"codevolve run --resume {job_id} --db run.sqlite"
    assert f"interrupted ({number.name}): job {job_id} is paused; resume with `{resume}`" in err

    shown = codevolve("status", job_id, "--json", "--db", str(db))
    state = json.loads(shown.stdout)
    assert state["state"] == "paused"
    assert state["error"] == f"interrupted ({number.name})"
    assert 0 < state["proposals"] < PROPOSALS

    resumed = codevolve(*resume.split()[1:], "--quiet", cwd=tmp_path, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads(codevolve("status", job_id, "--json", "--db", str(db)).stdout)
    assert final["state"] == "done" and final["proposals"] == PROPOSALS
    assert final["error"] is None
