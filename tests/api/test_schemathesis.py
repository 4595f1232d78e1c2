"""Schemathesis against the OpenAPI schema of a running server (uvicorn, real Postgres): every
operation, generated valid and invalid inputs, zero server errors.

The suite runs the fuzzing and stateful phases with a few examples per operation (about 90 cases);
the boundary-value "coverage" phase adds about 700 more and a minute: run it by hand with
``schemathesis run URL/openapi.json -H 'Authorization: Bearer ADMIN' -c not_a_server_error``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from codevolve.services.api.app import create_app
from codevolve.services.settings import Settings
from tests.api.conftest import served

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
ADMIN = "schemathesis-admin-token"


@pytest.fixture
def server(migrated_postgres_url: str) -> Iterator[str]:
    """The app served by uvicorn in a thread of this process; yields its base URL."""
    settings = Settings(db=migrated_postgres_url, admin_token=ADMIN, public_dashboard=False)
    with served(create_app(settings)) as (host, port):
        yield f"http://{host}:{port}"


@pytest.mark.slow
def test_no_generated_request_makes_the_server_fail(server: str, tmp_path: Path) -> None:
    run = subprocess.run(
        [
            str(SCHEMATHESIS),
            "run",
            f"{server}/openapi.json",
            "--header",
            f"Authorization: Bearer {ADMIN}",
            "--checks",
            "not_a_server_error",
            "--phases",
            "examples,fuzzing,stateful",
            "--max-examples",
            "5",
            "--seed",
            "4",
            "--generation-database",
            "none",
            "--no-color",
            "--report-dir",
            str(tmp_path / "report"),
        ],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
        cwd=tmp_path,  # its cache folder (.schemathesis) goes there, not into the checkout
    )
    assert run.returncode == 0, run.stdout[-4000:]
    assert "passed" in run.stdout and " failed" not in run.stdout.split("SUMMARY")[-1]
