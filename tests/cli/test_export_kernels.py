"""``codevolve export JOB --format triton`` (gemm-kernel-gpu) and ``--format module``
(KernelBench): the real command writes a module, and the module's own test is run the way a user
would run it (``python FILE``, ``pytest FILE``) on the CPU: KernelBench models in eager PyTorch,
Triton kernels in Triton's interpreter (TRITON_INTERPRET=1, with bf16 ``tl.dot`` fixed by
bf16_dot_interpreter.py). A wrong program's export fails its own test."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codevolve.problems.gemm_kernel_gpu.kernel_source import initial_program
from tests.cli.conftest import Outcome, codevolve
from tests.cli.export_jobs import DEVICE, PROBLEM_FILE, gemm_kernel_job, kernelbench_job

ROOT = Path(__file__).resolve().parents[2]
INTERPRETER_FIX = "tests.cli.bf16_dot_interpreter"
STORE = "    tl.store(y_ptrs, acc.to(tl.bfloat16), mask=(rows[:, None] < M) & (cols[None, :] < N))"

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, ReLU, then a fixed scale."""

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return scale(torch.relu(self.linear(x)))


def scale(x):
    return x * factor


factor = 2.0
batch_size = 8
in_features = 32
out_features = 16


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''
# An evolved program: its own scale helper (the reference's is renamed in the export, or it
# would replace this one), F.linear for the layer, the same parameters from the same seed.
EVOLVED = """import torch
import torch.nn as nn
import torch.nn.functional as F

factor = 2.0
batch_size = 8
in_features = 32
out_features = 16

# EVOLVE-BLOCK-START
def scale(x):
    return x + x


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return scale(F.relu(F.linear(x, self.linear.weight, self.linear.bias)))
# EVOLVE-BLOCK-END
"""


def _db(tmp_path: Path) -> str:
    return str(tmp_path / "codevolve.sqlite")  # the file migrated_sqlite_url made


def _run_module(path: Path, *, pytest_run: bool, interpret: bool = False) -> Outcome:
    """The exported module's test as a user runs it, in a fresh process in the file's folder."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    if pytest_run:
        fix = ["-p", INTERPRETER_FIX] if interpret else []
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *fix, path.name]
    elif interpret:
        run = f"import runpy, {INTERPRETER_FIX}; runpy.run_path({path.name!r}, run_name='__main__')"
        command = [sys.executable, "-c", run]
    else:
        command = [sys.executable, path.name]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=path.parent, env=env, timeout=100
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def _export(job_id: str, fmt: str, db: str, out: Path) -> Path:
    outcome = codevolve("export", job_id, "--format", fmt, "--db", db, "--out", str(out))
    assert outcome.returncode == 0, outcome.stderr
    ast.parse(out.read_text(), filename=str(out))
    return out


def _top_level(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}


# ------------------------------------------------------------------------------ --format triton


@pytest.mark.slow
def test_the_triton_export_of_the_initial_program_passes_its_own_test(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    job_id = gemm_kernel_job(migrated_sqlite_url, initial_program(), score=1.0734)
    module = _export(job_id, "triton", _db(tmp_path), tmp_path / "gemm_kernel.py")
    text = module.read_text()
    header = text[: text.index("import torch")]
    assert job_id in header and "1.0734" in header and DEVICE in header
    assert initial_program() in text  # the program as it was measured, verbatim
    assert {"matmul", "test_matmul", "launch_tiled", "choose_config"} <= _top_level(module)
    direct = _run_module(module, pytest_run=False, interpret=True)
    assert direct.returncode == 0, direct.stderr
    assert "test_matmul passed" in direct.stdout
    collected = _run_module(module, pytest_run=True, interpret=True)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "1 passed" in collected.stdout


@pytest.mark.slow
def test_the_triton_export_of_a_wrong_program_fails_its_own_test(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    assert STORE in initial_program()
    doubled = initial_program().replace(STORE, STORE.replace("acc.to(", "(2 * acc).to("))
    job_id = gemm_kernel_job(migrated_sqlite_url, doubled)
    module = _export(job_id, "triton", _db(tmp_path), tmp_path / "gemm_kernel.py")
    outcome = _run_module(module, pytest_run=True, interpret=True)
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    assert "1 failed" in outcome.stdout and "elements wrong" in outcome.stdout


def test_the_triton_export_prints_the_module_without_out(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    job_id = gemm_kernel_job(migrated_sqlite_url, initial_program())
    outcome = codevolve("export", job_id, "--format", "triton", "--db", _db(tmp_path))
    assert outcome.returncode == 0, outcome.stderr
    assert "matmul" in {n.name for n in ast.parse(outcome.stdout).body if hasattr(n, "name")}
    assert "\nmatmul_into = matmul" in outcome.stdout
    assert "from gemm_kernel import matmul" in outcome.stdout


def test_the_exported_figures_are_the_harnesss() -> None:
    """The module carries the harness's tolerance and workspace size as numbers (it must run
    without codevolve): they follow the harness when it changes."""
    from codevolve.problems.gemm_kernel_gpu import export as triton_module
    from codevolve.problems.gemm_kernel_gpu.device import kernel_bench
    from codevolve.problems.gemm_tiling import gpu_timing

    assert triton_module.RTOL == gpu_timing.RTOL
    assert triton_module.ATOL_OF_RMS == gpu_timing.ATOL_OF_RMS
    assert triton_module.MIN_WORKSPACE == kernel_bench.MIN_WORKSPACE


# ------------------------------------------------------------------------------ --format module


@pytest.mark.slow
def test_the_module_export_passes_its_own_test_with_the_programs_helper(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    job_id = kernelbench_job(migrated_sqlite_url, reference=REFERENCE, program=EVOLVED)
    module = _export(job_id, "module", _db(tmp_path), tmp_path / "model_new.py")
    text = module.read_text()
    assert EVOLVED in text and "def scale_reference(x):" in text
    assert {"ModelNew", "Model", "get_inputs", "get_init_inputs", "test_model_new"} <= _top_level(
        module
    )
    assert job_id in text and "2.500x PyTorch eager" in text and DEVICE in text
    assert f"# ==================== the reference: {PROBLEM_FILE}.py" in text
    direct = _run_module(module, pytest_run=False)
    assert direct.returncode == 0, direct.stderr
    assert "test_model_new passed" in direct.stdout
    collected = _run_module(module, pytest_run=True)
    assert collected.returncode == 0, collected.stdout + collected.stderr


@pytest.mark.slow
def test_the_module_export_of_a_wrong_model_new_fails_its_own_test(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    # Wrong only through its helper: were the reference's scale to replace the program's in the
    # exported module, both models would compute x * 2 and the test would pass.
    wrong = EVOLVED.replace("return x + x", "return x * 3")
    job_id = kernelbench_job(migrated_sqlite_url, reference=REFERENCE, program=wrong)
    module = _export(job_id, "module", _db(tmp_path), tmp_path / "model_new.py")
    outcome = _run_module(module, pytest_run=False)
    assert outcome.returncode == 1
    assert "AssertionError: trial 0, output 0: max abs difference" in outcome.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("tolerance", "passes"), [(None, False), (1e-2, True)])
def test_the_module_export_checks_with_the_problems_tolerance(
    tolerance: float | None, passes: bool, migrated_sqlite_url: str, tmp_path: Path
) -> None:
    off = EVOLVED.replace("return x + x", "return (x + x) * (1 + 1e-3)")  # 1e-3 relative error
    job_id = kernelbench_job(
        migrated_sqlite_url, reference=REFERENCE, program=off, tolerance=tolerance
    )
    module = _export(job_id, "module", _db(tmp_path), tmp_path / "model_new.py")
    outcome = _run_module(module, pytest_run=False)
    assert (outcome.returncode == 0) is passes, outcome.stderr


# ------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("fmt", ["triton", "module"])
def test_an_unknown_job_is_refused(fmt: str, migrated_sqlite_url: str, tmp_path: Path) -> None:
    outcome = codevolve("export", "nope", "--format", fmt, "--db", _db(tmp_path))
    assert outcome.returncode == 2
    assert outcome.error_line == "error: no job 'nope' in this database; check the id and --db"


def test_a_job_of_another_problem_is_refused(migrated_sqlite_url: str, tmp_path: Path) -> None:
    kernel = gemm_kernel_job(migrated_sqlite_url, initial_program())
    kernelbench = kernelbench_job(migrated_sqlite_url, reference=REFERENCE, program=EVOLVED)
    out = tmp_path / "x.py"
    as_module = codevolve("export", kernel, "--format", "module", "--db", _db(tmp_path))
    assert as_module.returncode == 2
    assert "is a job of gemm-kernel-gpu, which has no export as module" in as_module.error_line
    as_triton = codevolve(
        "export", kernelbench, "--format", "triton", "--db", _db(tmp_path), "--out", str(out)
    )
    assert as_triton.returncode == 2
    assert "which has no export as triton" in as_triton.error_line
    assert "exports gemm-kernel-gpu jobs (--format triton)" in as_triton.error_line
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["triton", "module"])
def test_a_job_with_no_best_program_is_refused(
    fmt: str, migrated_sqlite_url: str, tmp_path: Path
) -> None:
    if fmt == "triton":
        job_id = gemm_kernel_job(migrated_sqlite_url, None)
    else:
        job_id = kernelbench_job(migrated_sqlite_url, reference=REFERENCE, program=None)
    out = tmp_path / "x.py"
    outcome = codevolve("export", job_id, "--format", fmt, "--db", _db(tmp_path), "--out", str(out))
    assert outcome.returncode == 2
    assert f"job {job_id} has no best program yet" in outcome.error_line
    assert not out.exists()


def test_out_in_a_missing_folder_is_refused(migrated_sqlite_url: str, tmp_path: Path) -> None:
    job_id = gemm_kernel_job(migrated_sqlite_url, initial_program())
    out = tmp_path / "missing" / "k.py"
    outcome = codevolve(
        "export", job_id, "--format", "triton", "--db", _db(tmp_path), "--out", str(out)
    )
    assert outcome.returncode == 2
    assert outcome.error_line == f"error: --out {out}: no folder {out.parent}; create it first"


def test_json_is_refused_with_a_module_format(migrated_sqlite_url: str, tmp_path: Path) -> None:
    job_id = gemm_kernel_job(migrated_sqlite_url, initial_program())
    outcome = codevolve("export", job_id, "--format", "triton", "--json", "--db", _db(tmp_path))
    assert outcome.returncode == 2
    assert outcome.error_line == "error: --json applies to --format decompositions, not triton"
