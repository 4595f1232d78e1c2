"""An OpenEvolve folder whose initial program falls below its cascade threshold runs as it does
in OpenEvolve: the program is kept with its first stage's score, the search improves from there,
and the figures that the run, ``status`` and ``show`` print agree. Through the real command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import codevolve

INITIAL = """\
# EVOLVE-BLOCK-START
X = 1.5
# EVOLVE-BLOCK-END
"""
EVALUATOR = """\
import importlib.util


def _x(path):
    spec = importlib.util.spec_from_file_location("candidate_program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return float(module.X)


def evaluate_stage1(program_path):
    return {"combined_score": _x(program_path) / 2}


def evaluate_stage2(program_path):
    return {"combined_score": 1.0 + _x(program_path) / 10}
"""
CONFIG = """\
evaluator:
  cascade_thresholds: [0.8]
"""


def _folder(tmp_path: Path, config: str) -> Path:
    folder = tmp_path / "below_threshold"
    folder.mkdir()
    (folder / "initial_program.py").write_text(INITIAL)
    (folder / "evaluator.py").write_text(EVALUATOR)
    (folder / "config.yaml").write_text(config)
    return folder


def _run(tmp_path: Path, folder: Path) -> tuple[dict[str, Any], str]:
    """The run's report and what it printed."""
    outcome = codevolve(
        "run", "--problem-dir", str(folder), "--proposals", "30", "--seed", "1",
        "--remeasure-samples", "1", "--db", "run.sqlite", "--report", "report.json",
        cwd=tmp_path, timeout=110,
    )  # fmt: skip
    assert outcome.returncode == 0, outcome.stderr
    return json.loads((tmp_path / "report.json").read_text()), outcome.stdout + outcome.stderr


@pytest.mark.slow
def test_an_initial_program_below_a_threshold_is_kept_and_the_search_goes_on(
    tmp_path: Path,
) -> None:
    report, printed = _run(tmp_path, _folder(tmp_path, CONFIG))
    assert report["state"] == "done"
    assert report["rejected"] == 0 and report["failed"] == 0
    # Picked at stage 1's 0.75 (below 0.8: stage 2 did not run), confirmed on a fresh sample.
    assert report["initial_picked_score"] == pytest.approx(0.75)
    assert report["initial_score"] == pytest.approx(0.75)
    assert report["best_score"] > report["initial_score"]
    assert report["evaluated"] >= 15  # most proposals became evaluated programs
    assert report["label"] == "below_threshold"
    assert f"job {report['job_id']} (below_threshold, seed 1)" in " ".join(printed.split())

    status = codevolve("status", str(report["job_id"]), "--db", "run.sqlite", cwd=tmp_path)
    assert "(below_threshold): done" in status.stdout
    best = report["best_score"]
    assert isinstance(best, float)
    assert f"best: {best:.4f} confirmed on 1 fresh samples" in status.stdout
    shown = codevolve("show", str(report["best_program_id"]), "--json", "--db", "run.sqlite",
                      cwd=tmp_path)  # fmt: skip
    program = json.loads(shown.stdout)
    assert program["remeasure"]["confirmed"] == pytest.approx(best)
    assert program["score"] == pytest.approx(report["best_picked_score"])


@pytest.mark.slow
def test_with_the_hard_gate_the_initial_program_is_kept_and_children_below_it_rejected(
    tmp_path: Path,
) -> None:
    config = CONFIG + "  cascade_thresholds_reject: true\n"
    report, _ = _run(tmp_path, _folder(tmp_path, config))
    assert report["state"] == "done"
    assert report["initial_picked_score"] == pytest.approx(0.75)
    assert report["rejected"] > 0  # children below the gate: not kept
