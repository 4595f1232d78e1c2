"""``codevolve evaluate``: exit 1 with the reason on one line when the program fails, 0 when it
passes; a short summary unless --json; unusable --shapes is a usage error (exit 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import codevolve.problems.examples as examples
from codevolve.problems.registry import get_problem
from tests.cli.conftest import codevolve
from tests.kernelbench_programs import SWISH


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
    assert full.returncode == 0 and len(record["shapes"]) == 583  # every grid shape


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


# ------------------------------------------------------------------ a folder, a KernelBench file

EXAMPLES = Path(examples.__file__).parent


def test_a_folder_evaluates_its_initial_program_stage_by_stage() -> None:
    outcome = codevolve("evaluate", "--problem-dir", str(EXAMPLES / "circle_packing"))
    assert outcome.returncode == 0, outcome.stderr
    lines = outcome.stdout.splitlines()
    assert lines[0] == "the initial program on circle_packing: evaluated, score 2.3560"
    assert lines[1:5] == [
        "  stage stage1: passed 1.0000",
        "    combined_score 1, validity 1",
        "  stage stage2: passed 2.3560",
        "    combined_score 2.356, sum_radii 2.356, target_ratio 0.8938, validity 1",
    ]


TINY_EVALUATOR = """import importlib.util


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"combined_score": float(module.solve())}
"""


def test_a_failing_program_of_a_folder_exits_1_with_the_evaluators_reason(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "evaluator.py").write_text(TINY_EVALUATOR)
    (folder / "initial_program.py").write_text("def solve():\n    return 1.0\n")
    program = tmp_path / "candidate.py"
    program.write_text("def solve():\n    raise ValueError('no answer today')\n")
    outcome = codevolve("evaluate", "--problem-dir", str(folder), "--program", str(program))
    assert outcome.returncode == 1, outcome.stderr
    assert outcome.stdout.splitlines()[0] == f"{program} on tiny: failed, score -"
    (reason,) = [line for line in outcome.stdout.splitlines() if line.startswith("reason: ")]
    assert "ValueError: no answer today" in reason

    initial = codevolve("evaluate", "--problem-dir", str(folder))
    assert initial.returncode == 0, initial.stderr
    assert initial.stdout.splitlines()[:2] == [
        "the initial program on tiny: evaluated, score 1.0000",
        "  stage evaluate: passed 1.0000",
    ]


def _folder_with(tmp_path: Path, config: str) -> Path:
    folder = tmp_path / "problem"
    shutil.copytree(EXAMPLES / "function_minimization", folder)
    (folder / "other.yaml").write_text(config)
    return folder


def test_a_threshold_stops_the_cascade_and_rejects_only_as_a_hard_gate(tmp_path: Path) -> None:
    folder = _folder_with(tmp_path, "evaluator:\n  cascade_thresholds: [2.0]\n")
    config = str(folder / "other.yaml")
    stopped = codevolve("evaluate", "--problem-dir", str(folder), "--config", config)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.splitlines()[0].startswith(
        "the initial program on problem/other.yaml: evaluated, score 0."
    )
    assert "    stopped here: score 0." in stopped.stdout
    assert "stage stage2" not in stopped.stdout

    (folder / "other.yaml").write_text(
        "evaluator:\n  cascade_thresholds: [2.0]\n  cascade_thresholds_reject: true\n"
    )
    program = folder / "initial_program.py"
    rejected = codevolve(
        "evaluate", "--problem-dir", str(folder), "--config", config, "--program", str(program)
    )
    assert rejected.returncode == 1, rejected.stderr
    assert rejected.stdout.splitlines()[0].endswith(": rejected, score -")
    (reason,) = [line for line in rejected.stdout.splitlines() if line.startswith("reason: ")]
    assert reason.startswith("reason: stage stage1: rejected: score 0.")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "error: evaluate: name the problem: --problem NAME"),
        (
            ("--problem", "gemm-tiling", "--problem-dir", "."),
            "error: evaluate: give one of --problem, --problem-dir, --kernel-problem, not "
            "--problem and --problem-dir",
        ),
        (
            ("--problem", "gemm-tiling", "--config", "c.yaml"),
            "error: evaluate: --config goes with --problem-dir; drop it or add --problem-dir",
        ),
        (("--problem-dir", "nowhere"), "error: nowhere: not a directory"),
        (
            ("--kernel-problem", "model.txt"),
            "error: --kernel-problem model.txt: expected a .py file in the KernelBench format",
        ),
        (
            ("--problem-dir", str(EXAMPLES / "circle_packing"), "--shapes", "s.json"),
            "error: --shapes applies to gemm-tiling only, not --problem-dir "
            f"{EXAMPLES / 'circle_packing'}",
        ),
        (
            ("--problem-dir", str(EXAMPLES / "circle_packing"), "--program", "."),
            "error: --program .: a folder, not a file",
        ),
    ],
    ids=["none", "two", "config-alone", "no-folder", "not-py", "shapes", "program-folder"],
)
def test_what_cannot_be_evaluated_is_one_error_line(
    args: tuple[str, ...], says: str, tmp_path: Path
) -> None:
    outcome = codevolve("evaluate", *args, cwd=tmp_path)
    assert outcome.returncode == 2
    assert outcome.error_line.startswith(says), outcome.error_line


def test_a_kernelbench_file_needs_a_device_and_names_the_option(tmp_path: Path) -> None:
    problem = tmp_path / "25_Swish.py"
    problem.write_text(SWISH)
    outcome = codevolve(
        "evaluate", "--kernel-problem", str(problem), env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert outcome.returncode == 2
    assert outcome.error_line == (
        "error: 25_Swish: its cascade needs a GPU and this run has none (no GPU visible) "
        "(--gpus cpu judges a KernelBench problem on the CPU)"
    )


@pytest.mark.slow
def test_a_kernelbench_file_is_judged_on_the_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    problem = tmp_path / "25_Swish.py"
    problem.write_text(SWISH)
    judge = ("--gpus", "cpu", "--baselines", "eager", "--judge-seeds", "1", "--judge-trials", "3")
    outcome = codevolve("evaluate", "--kernel-problem", str(problem), *judge, timeout=300)
    assert outcome.returncode == 0, outcome.stderr
    lines = outcome.stdout.splitlines()
    assert lines[0].startswith("the initial program on 25_Swish.py: evaluated, score ")
    assert "  stage judge: passed " in outcome.stdout
    assert "correct_kernelbench 1, speedup_eager " in outcome.stdout
