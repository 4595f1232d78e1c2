"""Helpers of the command-line tests: the real ``codevolve`` entry point in a subprocess, and
SQLite files to point it at (a small finished run, copied per test)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import (  # noqa: F401  (fixtures used by name)
    migrated_sqlite_url,
    sqlite_template,
)

RUN_PROPOSALS = 6  # the template run: enough for programs, over in a few seconds


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    @property
    def error_line(self) -> str:
        """The one line an error ends in; fails the test when there is not exactly one."""
        lines = [line for line in self.stderr.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1, self.stderr
        return lines[0]


def codevolve(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 90,
    env: dict[str, str] | None = None,
    without_override: bool = False,
) -> Outcome:
    """Run ``codevolve ARGS`` as a user would; nothing it prints may be a traceback. ``env`` is
    added to the environment; ``without_override`` runs it as a user whom file permissions bind
    (see :func:`without_permission_override`)."""
    prefix = without_permission_override() if without_override else []
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "codevolve.services.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    return Outcome(done.returncode, done.stdout, done.stderr)


def without_permission_override() -> list[str]:
    """The command prefix that makes file permissions bind: root reads and writes any file, so
    as root the command runs in a user namespace as the files' owner without that privilege (a
    file of mode 0444 is then read-only to it); anyone else is bound already."""
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("running as root without util-linux's unshare")
    return [unshare, "--user", "--map-user=1000", "--map-group=1000"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def job_rows(db: Path) -> list[tuple[str, str, str | None]]:
    """(id, state, error) of every job in an SQLite file."""
    with sqlite3.connect(db) as connection:
        return connection.execute(
            "SELECT id, state, error FROM jobs ORDER BY created_at"
        ).fetchall()


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """An SQLite file holding one finished gemm-tiling job, and that job's id."""
    db = tmp_path_factory.mktemp("template") / "run.sqlite"
    outcome = codevolve(
        "run", "gemm-tiling", "--proposals", str(RUN_PROPOSALS), "--db", str(db), "--quiet"
    )
    assert outcome.returncode == 0, outcome.stderr
    ((job_id, state, _),) = job_rows(db)
    assert state == "done"
    return db, job_id


@pytest.fixture
def run_db(finished_run: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    """A private copy of :func:`finished_run`'s file."""
    template, job_id = finished_run
    db = tmp_path / "run.sqlite"
    shutil.copyfile(template, db)
    return db, job_id
