"""A problem folder as users keep it (plots, earlier outputs, other configs, a saved best program,
a big array nothing reads) runs through the real ``codevolve`` entry point: only what the evaluator
needs is bundled, a data file it names is readable in the sandbox, the rest is reported in one
warning line, and a needed file over the cap stops the run with one line saying what to do."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from codevolve.problems.openevolve.bundle import MAX_FILE_BYTES

MiB = 1 << 20
INITIAL = """\
# EVOLVE-BLOCK-START
X = 1.5
# EVOLVE-BLOCK-END
"""
EVALUATOR = """\
import importlib.util
import json
from pathlib import Path

from scoring import distance

TARGET = json.loads((Path(__file__).parent / "data" / "target.json").read_text())


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("candidate_program", program_path)
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    return {"combined_score": -distance(program.X, TARGET["x"]), "samples": len(TARGET["pad"])}


if __name__ == "__main__":
    print(evaluate("openevolve_output/best/best_program.py"))
"""
SCORING = "def distance(x, target):\n    return (x - target) ** 2\n"
# More than the sandbox's 64 KiB output cap, which once bounded every file written there.
TARGET = json.dumps({"x": 3.0, "pad": [0] * 150_000})
NEEDED = {
    "initial_program.py": INITIAL,
    "evaluator.py": EVALUATOR,
    "scoring.py": SCORING,
    "config.yaml": "max_iterations: 100\nrandom_seed: 3\n",
    "data/target.json": TARGET,
}
SMALL_JUNK = {
    "best_program.py": INITIAL.replace("1.5", "2.9"),
    "config_phase_1.yaml": "max_iterations: 50\n",
    "config_phase_2.yaml": "max_iterations: 500\n",
    "config_llm_feedback.yaml": "max_iterations: 10\n",
    "README.md": "How the packing was found.\n",
    "openevolve_output/best/best_program.py": INITIAL.replace("1.5", "2.95"),
    "openevolve_output/best/best_program_info.json": "{}\n",
    "openevolve_output/logs/openevolve.log": "INFO started\n" * 1000,
}
BIG_JUNK = {  # bytes: tens of MiB that must not reach the bundle
    "circle_packing.png": 6 * MiB,
    "results/scores.png": 5 * MiB,
    "results/progress.gif": 4 * MiB,
    "data/unused_weights.npy": 12 * MiB,
    "openevolve_output/checkpoints/checkpoint_100/programs.json": 9 * MiB,
}


def codevolve(*args: str) -> subprocess.CompletedProcess[str]:
    # A narrow console: each message must still be one line.
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "codevolve.services.cli", *args],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
        env=env,
    )


def build(folder: Path, files: dict[str, str], sizes: dict[str, int]) -> Path:
    for path, text in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    for path, size in sizes.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(b"\x01" * size)
    return folder


@pytest.mark.slow
def test_a_cluttered_folder_runs_with_only_what_its_evaluator_needs(tmp_path: Path) -> None:
    folder = build(tmp_path / "circle_packing", {**NEEDED, **SMALL_JUNK}, BIG_JUNK)
    db, report_path = tmp_path / "run.sqlite", tmp_path / "report.json"
    done = codevolve(
        "run", "--problem-dir", str(folder), "--proposals", "20", "--db", str(db),
        "--report", str(report_path), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(report_path.read_text())
    assert report["proposals"] == 20 and report["evaluated"] >= 1
    # The score needs data/target.json, read inside the sandbox: the initial program is 1.5 away.
    assert report["initial_score"] == pytest.approx(-(1.5**2))
    with sqlite3.connect(db) as conn:
        ((files,),) = conn.execute("select files from bundles").fetchall()
    stored = {path: base64.b64decode(data) for path, data in json.loads(files).items()}
    assert set(stored) == set(NEEDED)
    assert stored["data/target.json"] == TARGET.encode()

    warnings = [line for line in done.stderr.splitlines() if "left out of the bundle" in line]
    assert len(warnings) == 1, done.stderr
    assert "data/unused_weights.npy (12.0 MiB, not referenced)" in warnings[0]
    assert "circle_packing.png (6.0 MiB, image)" in warnings[0]


@pytest.mark.slow
def test_a_needed_file_over_the_cap_stops_the_run_with_one_line(tmp_path: Path) -> None:
    folder = build(tmp_path / "problem", NEEDED, {"data/target.json": MAX_FILE_BYTES + MiB})
    done = codevolve("run", "--problem-dir", str(folder), "--db", str(tmp_path / "x.sqlite"))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: data/target.json: 9.0 MiB, more than the 8.0 MiB")
    assert "(evaluator.py refers to it)" in lines[0]
    assert f'"/data/target.json" to {folder / ".codevolveignore"}' in lines[0]
    assert "Traceback" not in done.stderr
