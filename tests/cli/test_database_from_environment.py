"""A database URL given by ``CODEVOLVE_DB`` (or its alias ``CODEVOLVE_DATABASE_URL``): its errors
name that variable, not ``--db``, which the user never typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import codevolve


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("mysql://x/y", "CODEVOLVE_DB=mysql://x/y: mysql:// databases are not supported"),
        ("/proc/x.sqlite", "CODEVOLVE_DB=/proc/x.sqlite: cannot create a database there"),
        ("/tmp", "CODEVOLVE_DB=/tmp is a folder"),
        (
            "postgresql://nobody@127.0.0.1:1/x",
            "CODEVOLVE_DB=postgresql://nobody@127.0.0.1:1/x: cannot use this database",
        ),
    ],
)
def test_an_unusable_database_from_the_environment_names_the_variable(
    value: str, says: str
) -> None:
    outcome = codevolve("run", "gemm-tiling", "--quiet", env={"CODEVOLVE_DB": value})
    assert outcome.returncode == 2
    assert outcome.error_line.startswith(f"error: {says}"), outcome.error_line
    assert "--db" not in outcome.error_line.split(";")[0]


def test_a_missing_database_from_the_environment_says_to_set_the_variable(
    tmp_path: Path,
) -> None:
    outcome = codevolve("status", "abc", cwd=tmp_path, env={"CODEVOLVE_DB": "never.sqlite"})
    assert outcome.returncode == 2
    assert outcome.error_line.startswith("error: no database at never.sqlite (CODEVOLVE_DB); ")
    assert outcome.error_line.endswith("or set CODEVOLVE_DB to an existing database (or pass --db)")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_job_in_a_database_from_the_environment_names_the_variable(
    run_db: tuple[Path, str],
) -> None:
    db, _ = run_db
    outcome = codevolve("status", "nope", env={"CODEVOLVE_DB": str(db)})
    assert outcome.error_line == f"error: no job 'nope' in {db}; check the id and CODEVOLVE_DB"


def test_the_alias_variable_is_named_when_it_gave_the_url(tmp_path: Path) -> None:
    outcome = codevolve("status", "abc", env={"CODEVOLVE_DATABASE_URL": str(tmp_path)})
    assert (
        outcome.error_line
        == f"error: CODEVOLVE_DATABASE_URL={tmp_path} is a folder; pass a database file"
    )


def test_a_db_on_the_command_line_is_named_as_typed_over_the_environment(tmp_path: Path) -> None:
    outcome = codevolve("status", "abc", "--db", str(tmp_path), env={"CODEVOLVE_DB": "x.sqlite"})
    assert outcome.error_line == f"error: --db {tmp_path} is a folder; pass a database file"
