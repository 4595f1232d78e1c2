"""``codevolve serve``'s pool and read cache settings, refused in one line when out of range."""

from __future__ import annotations

import os
import subprocess
import sys


def _serve(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "codevolve.services.cli", "serve", "--no-api", *args],
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
