"""Values of a folder's config.yaml that the job config refuses end in one error line naming the
key as the file spells it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import codevolve


@pytest.mark.parametrize(
    ("config", "line"),
    [
        (
            "llm:\n  temperature: 5\n  models: [{name: m}]\n",
            "error: config.yaml: llm.temperature must be at most 2.0, got 5.0",
        ),
        (
            "evaluator:\n  parallel_evaluations: 0\n",
            "error: config.yaml: evaluator.parallel_evaluations must be at least 1",
        ),
        ("llm:\n  api_key: 12\n", "error: config.yaml: llm.api_key must be text"),
    ],
)
def test_a_refused_openevolve_value_names_its_key(tmp_path: Path, config: str, line: str) -> None:
    (tmp_path / "initial_program.py").write_text(
        "# EVOLVE-BLOCK-START\nX = 1\n# EVOLVE-BLOCK-END\n"
    )
    (tmp_path / "evaluator.py").write_text("def evaluate(p):\n    return {'combined_score': 1.0}\n")
    (tmp_path / "config.yaml").write_text(config)
    outcome = codevolve("run", "--problem-dir", str(tmp_path), "--db", str(tmp_path / "x.sqlite"))
    assert outcome.returncode == 2
    assert outcome.error_line == line
