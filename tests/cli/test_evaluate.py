"""``codevolve evaluate``: exit 1 with the reason on one line when the program fails, 0 when it
passes; a short summary unless --json; unusable --shapes is a usage error (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codevolve.problems.registry import get_problem
from tests.cli.conftest import codevolve


@pytest.mark.parametrize(
    ("source", "reason"),
    [("def choose_config(M, N, K:\n", "syntax error"), ("", "reason: stage")],
    ids=["syntax-error", "empty"],
)
def test_a_program_that_fails_exits_1_with_its_reason(
    source: str, reason: str, tmp_path: Path
) -> None:
    program = tmp_path / "candidate.py"
    program.write_text(source)
    outcome = codevolve("evaluate", "--problem", "gemm-tiling", "--program", str(program))
    assert outcome.returncode == 1
    (line,) = [line for line in outcome.stdout.splitlines() if line.startswith("reason: ")]
    assert reason in line
    assert ": failed" in outcome.stdout.splitlines()[0]

    full = codevolve("evaluate", "--problem", "gemm-tiling", "--program", str(program), "--json")
    assert full.returncode == 1
    assert json.loads(full.stdout)["status"] == "failed"


def test_a_passing_program_exits_0_with_a_short_summary(tmp_path: Path) -> None:
    program = tmp_path / "initial.py"
    program.write_text(get_problem("gemm-tiling").initial_program)
    outcome = codevolve("evaluate", "--problem", "gemm-tiling", "--program", str(program))
    assert outcome.returncode == 0, outcome.stderr
    lines = outcome.stdout.splitlines()
    assert len(lines) < 20
    assert lines[0].endswith(": evaluated, score 1.0000")
    assert any(line.startswith("  decode (M 1-16): ") for line in lines)
    assert any(line.startswith("  prefill (M ") for line in lines)

    full = codevolve("evaluate", "--problem", "gemm-tiling", "--program", str(program), "--json")
    record = json.loads(full.stdout)
    assert full.returncode == 0 and len(record["shapes"]) == 88


@pytest.mark.parametrize(
    ("shapes", "says"),
    [("not json at all", "not JSON"), ('{"M": 1}', "expected a non-empty JSON list")],
)
def test_unusable_shapes_are_a_usage_error(shapes: str, says: str, tmp_path: Path) -> None:
    program = tmp_path / "initial.py"
    program.write_text(get_problem("gemm-tiling").initial_program)
    path = tmp_path / "shapes.json"
    path.write_text(shapes)
    outcome = codevolve(
        "evaluate", "--problem", "gemm-tiling", "--program", str(program), "--shapes", str(path)
    )
    assert outcome.returncode == 2
    assert outcome.error_line.startswith(f"error: --shapes {path}: ")
    assert says in outcome.error_line


def test_a_missing_program_file_is_named(tmp_path: Path) -> None:
    outcome = codevolve(
        "evaluate", "--problem", "gemm-tiling", "--program", "nope.py", cwd=tmp_path
    )
    assert outcome.returncode == 2
    assert outcome.error_line == "error: --program nope.py: no such file"
