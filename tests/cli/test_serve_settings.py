"""``codevolve serve``'s port, pool and read cache settings, refused in one line when out of
range; and the lines it prints when it starts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest


def _serve(
    *args: str, env: dict[str, str], role: str | None = "--no-api"
) -> subprocess.CompletedProcess[str]:
    before = [] if role is None else [role]
    return subprocess.run(
        [sys.executable, "-m", "codevolve.services.cli", "serve", *before, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )


def test_a_max_running_jobs_of_zero_in_the_environment_is_one_line_naming_it() -> None:
    done = _serve(env={"CODEVOLVE_MAX_RUNNING_JOBS": "0"})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("error: environment: CODEVOLVE_MAX_RUNNING_JOBS='0' is invalid")


def test_a_max_running_jobs_of_zero_on_the_command_line_is_refused() -> None:
    done = _serve("--max-running-jobs", "0", env={})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--max-running-jobs: must be at least 1, got 0" in done.stderr


def test_a_bad_read_cache_time_is_one_line_naming_it() -> None:
    for given, why in (
        ("-1", "must be 0 or more seconds, got '-1'"),
        ("inf", "must be 0 or more seconds, got 'inf'"),
        ("soon", "expected seconds (e.g. 0.5), got 'soon'"),
    ):
        done = _serve("--read-cache-s", given, env={})
        assert done.returncode == 2 and "Traceback" not in done.stderr, given
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and f"--read-cache-s: {why}" in lines[0], given


def test_a_negative_read_cache_time_in_the_environment_is_one_line_naming_it() -> None:
    done = _serve(env={"CODEVOLVE_API_READ_CACHE_S": "-1"})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("error: environment: CODEVOLVE_API_READ_CACHE_S='-1' is invalid")


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_a_port_out_of_range_is_one_line_naming_it(port: str, tmp_path: Path) -> None:
    done = _serve("--port", port, "--db", str(tmp_path / "x.sqlite"), env={}, role=None)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "error: codevolve serve: argument --port: must be a port number from 0 (any free port) "
        f"to 65535, got {port} (see `codevolve serve --help`)"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(120)
def test_serve_says_where_it_listens_and_where_the_dashboard_is(tmp_path: Path) -> None:
    db = tmp_path / "x.sqlite"
    server = subprocess.Popen(
        [sys.executable, "-m", "codevolve.services.cli", "serve", "--port", "0", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        first, second = server.stderr.readline(), server.stderr.readline()
        site = re.fullmatch(
            rf"codevolve serve: running the jobs of {re.escape(str(db))}; listening on "
            r"(http://127\.0\.0\.1:\d+)\n",
            first,
        )
        assert site is not None, first + second
        url = site.group(1)
        assert second == (
            f"codevolve serve: dashboard: {url}/   REST API: {url}/api/v1   (Ctrl-C stops)\n"
        )
        answered = _get(f"{url}/api/v1/health")
        assert answered == 200
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)
    assert server.returncode == 0


def _get(url: str) -> int:
    """The status of a GET, retried while the API process starts."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
