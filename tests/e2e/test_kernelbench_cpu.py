"""KernelBench problems end to end through the real command, the judge in a CPU device process.

``--gpus cpu`` runs the device jobs in a process that sees no GPU (Triton kernels in Triton's
interpreter). The figures are CPU figures; what is tested is the path: a file read, the job
written, the simulated proposer's rewrite judged correct and faster, the set's table and fast_p,
and a second run of the same command reusing the finished jobs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import codevolve
from tests.kernelbench_level2 import CONV_CHANNEL_MIN, FEATURE_SUM
from tests.kernelbench_programs import SWISH

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

DIAG = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """diag(A) @ B: a dense matrix product where a broadcast product does."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        return torch.diag(A) @ B

M = 768
N = 256

def get_inputs():
    return [torch.rand(M), torch.rand(M, N)]

def get_init_inputs():
    return []
'''


JUDGE = ("--gpus", "cpu", "--baselines", "eager", "--judge-seeds", "1", "--judge-trials", "5")


def test_one_problem_file_evolves_to_a_correct_faster_model_new(tmp_path: Path) -> None:
    problem = tmp_path / "12_diag_matmul.py"
    problem.write_text(DIAG)
    db = tmp_path / "kb.sqlite"
    report = tmp_path / "report.json"
    outcome = codevolve(
        "run", "--kernel-problem", str(problem), "--proposals", "4", "--quiet",
        "--db", str(db), "--report", str(report), *JUDGE, timeout=600,
    )  # fmt: skip
    assert outcome.returncode == 0, outcome.stderr
    figures = json.loads(report.read_text())
    # The broadcast rewrite skips an M x M matrix: tens of times faster even on a busy CPU.
    assert figures["best_score"] > 3, figures
    best = codevolve("best", figures["job_id"], "--db", str(db))
    assert "class ModelNew" in best.stdout and "A.unsqueeze(1) * B" in best.stdout


def test_a_set_reports_fast_p_and_a_second_run_reuses_its_jobs(tmp_path: Path) -> None:
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    (level / "12_diag_matmul.py").write_text(DIAG)
    (level / "25_Swish.py").write_text(SWISH)
    (level / "99_broken.py").write_text("import torch\n")  # not a problem: skipped, counted
    db = tmp_path / "kb.sqlite"
    report = tmp_path / "set.json"
    command = (
        "kernelbench", "--dir", str(tmp_path / "KernelBench"), "--level", "1",
        "--problems", "1-99", "--proposals", "3", "--db", str(db), "--report", str(report),
        *JUDGE,
    )  # fmt: skip
    first = codevolve(*command, timeout=900)
    assert first.returncode == 0, first.stderr
    figures = json.loads(report.read_text())
    assert [row["problem"] for row in figures["rows"]] == ["12_diag_matmul", "25_Swish"]
    assert [s["problem"] for s in figures["skipped"]] == ["99_broken"]
    assert figures["problems"] == 3  # the skipped file counts in every denominator
    assert figures["fast_p_eager"]["0.0"] == 2 / 3
    assert figures["fast_p_eager"]["1.0"] >= 1 / 3  # the diag rewrite at least
    assert figures["fast_p_compile"]["1.0"] is None  # compile was not timed
    assert "fast_1" in first.stdout

    again = codevolve(*command, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("done before") == 2
    assert json.loads(report.read_text())["rows"] == figures["rows"]

    # --report-only runs nothing: a problem without a job is "not run" and counts as unsolved
    softsign = SWISH.replace("x * torch.sigmoid(x)", "x / (1 + x.abs())")
    (level / "30_Softsign.py").write_text(softsign)
    only = codevolve(*command, "--report-only", timeout=300)
    assert only.returncode == 0, only.stderr
    assert "30_Softsign: not run" in only.stderr and "done before" not in only.stderr
    table = json.loads(report.read_text())
    assert table["rows"] == figures["rows"]
    assert table["whole_folder"]["problems"] == 4
    assert table["whole_folder"]["fast_p_eager"]["0.0"] == 2 / 4
    assert "1 not run" in only.stdout
    # a larger budget shows each problem's newest run within it; a smaller one finds none
    at = command.index("--proposals") + 1
    larger = (*command[:at], "9", *command[at + 1 :])
    assert codevolve(*larger, "--report-only", timeout=300).returncode == 0
    assert json.loads(report.read_text())["rows"] == figures["rows"]
    smaller = (*command[:at], "2", *command[at + 1 :])
    assert codevolve(*smaller, "--report-only", timeout=300).returncode == 0
    assert json.loads(report.read_text())["rows"] == []


SORT = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """Sorts each row: the simulated proposer finds nothing faster."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.sort(x, dim=1).values

def get_inputs():
    return [torch.rand(64, 512)]

def get_init_inputs():
    return []
'''


def test_a_best_that_is_the_initial_program_shows_one_figure_everywhere(tmp_path: Path) -> None:
    problem = tmp_path / "99_sort.py"
    problem.write_text(SORT)
    db = tmp_path / "kb.sqlite"
    report = tmp_path / "report.json"
    # Seed 2's two children sort along the wrong dimension: the initial program stays the best.
    outcome = codevolve(
        "run", "--kernel-problem", str(problem), "--proposals", "2", "--seed", "2", "--quiet",
        "--db", str(db), "--report", str(report), *JUDGE, timeout=600,
    )  # fmt: skip
    assert outcome.returncode == 0, outcome.stderr
    figures = json.loads(report.read_text())
    assert figures["label"] == "99_sort.py"
    assert figures["best_program_id"] == figures["initial_program_id"], figures
    # The initial program is re-measured like any would-be best, and it is the same figure.
    assert figures["initial_verdict"] == "confirmed"
    assert figures["initial_score"] == figures["best_score"] is not None
    assert figures["initial_picked_score"] == figures["best_picked_score"]
    confirmed, picked = figures["best_score"], figures["best_picked_score"]
    assert (
        f"score (confirmed on 5 fresh samples): initial {confirmed:.3f}, best {confirmed:.3f}; "
        f"as picked: initial {picked:.3f}, best {picked:.3f}"
    ) in " ".join(outcome.stdout.split())

    status = codevolve("status", figures["job_id"], "--db", str(db))
    assert f"best: {confirmed:.4f} confirmed on 5 fresh samples; {picked:.4f} as evaluated" in (
        " ".join(status.stdout.split())
    )
    shown = codevolve("show", figures["best_program_id"], "--db", str(db), "--json")
    summary = json.loads(shown.stdout)
    assert summary["remeasure"]["confirmed"] == confirmed
    assert summary["score"] == picked


@pytest.mark.timeout(900)
def test_a_level2_set_fuses_tails_and_sums_a_linear_as_a_matrix_vector_product(
    tmp_path: Path,
) -> None:
    level = tmp_path / "KernelBench" / "level2"
    level.mkdir(parents=True)
    # a product large enough that skipping it shows on a busy CPU, and after the sum only
    # operations over a dimension of size one (none left to a kernel in the interpreter)
    wide = FEATURE_SUM.replace("in_features = 40", "in_features = 2048")
    wide = wide.replace("out_features = 24", "out_features = 4096")
    wide = wide.replace("batch_size = 16", "batch_size = 128")
    wide = wide.replace(
        "return x * self.scaling_factor", "return torch.logsumexp(x, dim=1, keepdim=True)"
    )
    (level / "14_Gemm_Divide_Sum_Scaling.py").write_text(wide)
    (level / "25_Conv2d_Min.py").write_text(CONV_CHANNEL_MIN)
    report = tmp_path / "set.json"
    outcome = codevolve(
        "kernelbench", "--dir", str(tmp_path / "KernelBench"), "--level", "2",
        "--problems", "1-99", "--proposals", "3", "--db", str(tmp_path / "kb.sqlite"),
        "--report", str(report), *JUDGE, timeout=900,
    )  # fmt: skip
    assert outcome.returncode == 0, outcome.stderr
    rows = {row["problem"]: row for row in json.loads(report.read_text())["rows"]}
    summed = rows["14_Gemm_Divide_Sum_Scaling"]
    assert summed["correct"] and "feature_sum(" in summed["best_source"], summed
    assert summed["speedup_eager"] > 3, summed  # no matrix product left: tens of times
    fused = rows["25_Conv2d_Min"]  # correct; whether the kernel wins on a CPU is not asked
    assert fused["correct"], fused
