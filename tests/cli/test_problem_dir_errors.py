"""``codevolve run --problem-dir FOLDER``: errors of the folder's config name the file the user
typed with ``--config``, and an evaluator that fails the initial program ends the run in one
``error:`` line with the evaluator's reason, exit 1."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import codevolve.problems.examples as examples
from tests.cli.conftest import codevolve

EXAMPLE = Path(examples.__file__).parent / "function_minimization"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a: [1\n", "not valid YAML"),
        ("- 1\n", "the top level must be a mapping"),
        ("max_iterations: x\n", "max_iterations must be a number, not 'x'"),
    ],
)
def test_a_bad_config_file_is_named_as_typed(text: str, says: str, tmp_path: Path) -> None:
    (tmp_path / "other.yaml").write_text(text)
    outcome = codevolve(
        "run", "--problem-dir", str(EXAMPLE), "--config", "other.yaml", "--quiet", cwd=tmp_path
    )
    assert outcome.returncode == 2
    assert outcome.error_line.startswith(f"error: other.yaml: {says}"), outcome.error_line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.yaml"]


def test_a_bad_config_yaml_of_the_folder_is_named_config_yaml(tmp_path: Path) -> None:
    folder = tmp_path / "problem"
    shutil.copytree(EXAMPLE, folder)
    (folder / "config.yaml").write_text("- 1\n")
    outcome = codevolve("run", "--problem-dir", str(folder), "--quiet", cwd=tmp_path)
    assert outcome.returncode == 2
    assert outcome.error_line == "error: config.yaml: the top level must be a mapping"


FAILING = """

def evaluate_stage1(program_path):
    raise ValueError("the grid file data.csv is missing")


def evaluate(program_path):
    raise ValueError("the grid file data.csv is missing")
"""


def test_an_evaluator_that_fails_the_initial_program_ends_in_one_error_line(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "problem"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    with (folder / "evaluator.py").open("a") as evaluator:
        evaluator.write(FAILING)  # (the later definitions win)
    outcome = codevolve(
        "run",
        "--problem-dir",
        str(folder),
        "--proposals",
        "3",
        "--db",
        "x.sqlite",
        "--quiet",
        cwd=tmp_path,
    )
    assert outcome.returncode == 1
    last = outcome.stderr.strip().splitlines()[-1]
    assert last == outcome.error_line
    assert re.fullmatch(
        r"error: job \w+ failed: the initial program did not pass: exception: evaluate_stage1 "
        r"raised ValueError: the grid file data\.csv is missing",
        last,
    ), last
