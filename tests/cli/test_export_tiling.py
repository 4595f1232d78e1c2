"""``codevolve export JOB --format module`` of gemm-tiling and gemm-tiling-gpu jobs: the real
command writes a standalone module (the evolved ``choose_config`` behind a launch guard), and the
module's own test is run the way a user would run it (``python FILE``, ``pytest FILE``). The
guard answers the expert's config where the evolved rule's cannot launch, and counts and logs it;
a program illegal on a shape the search's checks never asked fails its export's test."""

from __future__ import annotations

import ast
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from codevolve.problems.gemm_tiling.baselines import expert_config
from codevolve.problems.gemm_tiling.problem import gemm_tiling_problem
from codevolve.problems.gemm_tiling.space import all_configs
from tests.cli.conftest import Outcome, codevolve
from tests.cli.export_jobs import DEVICE, tiling_job

INITIAL = gemm_tiling_problem().initial_program
FIRST_BRANCH = "    if M <= 32:\n"
BAD = "GemmConfig(M // M * 256, 256, 128, 4, 5, 8)"  # 552 registers a thread: cannot launch
GUARD = {"choose_config", "expert_config", "launch_problem"}


def _with_branch(test: str) -> str:
    """The initial program with a rule, before its first, that answers BAD where ``test``."""
    assert FIRST_BRANCH in INITIAL
    return INITIAL.replace(FIRST_BRANCH, f"    if {test}:\n        return {BAD}\n" + FIRST_BRANCH)


def _db(tmp_path: Path) -> str:
    return str(tmp_path / "codevolve.sqlite")  # the file migrated_sqlite_url made


def _export(job_id: str, db: str, out: Path) -> Path:
    outcome = codevolve("export", job_id, "--format", "module", "--db", db, "--out", str(out))
    assert outcome.returncode == 0, outcome.stderr
    assert f"wrote {out}" in outcome.stderr
    ast.parse(out.read_text(), filename=str(out))
    return out


def _python(path: Path, *args: str) -> Outcome:
    """``python ARGS`` in the module's folder, as a user runs it (codevolve not on the path)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=path.parent,
        env=env,
        timeout=100,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def test_the_export_of_the_initial_program_passes_its_own_test(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    job_id = tiling_job(migrated_sqlite_url, INITIAL, score=1.0412)
    module = _export(job_id, _db(tmp_path), tmp_path / "gemm_config.py")
    text = module.read_text()
    header = text[: text.index("# ==================== the program")]
    assert job_id in header and "1.0412" in header and "analytical H100 cost model" in header
    assert "legality:    proven for every input" in header
    assert "from gemm_config import choose_config" in header
    assert INITIAL.rstrip("\n") in text  # the program as it was measured, verbatim
    top = {n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert {*GUARD, "GemmConfig", "test_choose_config"} <= top
    direct = _python(module, module.name)
    assert direct.returncode == 0, direct.stderr
    assert "test_choose_config passed" in direct.stdout
    assert direct.stderr == ""  # the test's own fallbacks are not logged as the rule's
    collected = _python(module, "-m", "pytest", "-q", "-p", "no:cacheprovider", module.name)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "1 passed" in collected.stdout


def test_the_guard_answers_the_experts_config_where_the_rule_cannot_launch_counted_and_logged(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    job_id = tiling_job(migrated_sqlite_url, _with_branch("M % 1000 == 999"))
    module = _export(job_id, _db(tmp_path), tmp_path / "gemm_config.py")
    use = (
        "from gemm_config import FALLBACKS, choose_config, evolved_choose_config\n"
        "print(tuple(choose_config(999, 6144, 4096)), tuple(choose_config(1999, 50257, 768)))\n"
        "print(tuple(choose_config(1000, 6144, 4096)) == tuple(evolved_choose_config(1000, 6144, "
        "4096)))\n"
        "print(sorted(FALLBACKS.values()))\n"
    )
    outcome = _python(module, "-c", use)
    assert outcome.returncode == 0, outcome.stderr
    expert = expert_config(999, 6144, 4096).as_tuple()
    assert outcome.stdout.splitlines() == [f"{expert} {expert}", "True", "[2]"]
    # logged once as a warning (the second fallback of the same reason at debug level)
    assert outcome.stderr.splitlines() == [
        "choose_config(999, 6144, 4096): the evolved rule returned (256, 256, 128, 4, 5, 8): "
        "needs 552 registers per thread (max 255); the expert's config is used instead (1 such "
        "fallbacks)"
    ]


def test_the_guard_falls_back_when_the_rule_raises(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    source = INITIAL.replace(FIRST_BRANCH, "    if K == 13:\n        M = M // 0\n" + FIRST_BRANCH)
    job_id = tiling_job(migrated_sqlite_url, source)
    module = _export(job_id, _db(tmp_path), tmp_path / "gemm_config.py")
    use = "from gemm_config import choose_config\nprint(tuple(choose_config(4, 7, 13)))\n"
    outcome = _python(module, "-c", use)
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.strip() == str(expert_config(4, 7, 13).as_tuple())
    assert "the evolved rule raised ZeroDivisionError: integer division or modulo by zero" in (
        outcome.stderr
    )


@pytest.mark.parametrize(
    ("test", "named"),
    [
        ("M % 1000 == 999", "choose_config(999, 6144, 4096)"),
        ("N % 2 == 1", "choose_config(1, 1, 1)"),
    ],
)
def test_the_export_of_a_program_illegal_on_a_rare_shape_fails_its_own_test(
    test: str, named: str, migrated_sqlite_url: str, tmp_path: Path
) -> None:
    job_id = tiling_job(migrated_sqlite_url, _with_branch(test))
    module = _export(job_id, _db(tmp_path), tmp_path / "gemm_config.py")
    outcome = _python(module, "-m", "pytest", "-q", "-p", "no:cacheprovider", module.name)
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    assert f"{named} returned GemmConfig(block_m=256" in outcome.stdout
    assert "needs 552 registers per thread" in outcome.stdout


def test_a_gemm_tiling_gpu_job_is_exported_with_its_device(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    job_id = tiling_job(migrated_sqlite_url, INITIAL, problem="gemm-tiling-gpu")
    outcome = codevolve("export", job_id, "--format", "module", "--db", _db(tmp_path))
    assert outcome.returncode == 0, outcome.stderr
    assert "a codevolve gemm-tiling-gpu job" in outcome.stdout
    assert f"measured on: {DEVICE}" in outcome.stdout
    assert "from gemm_config import choose_config" in outcome.stdout  # the default file name


def test_the_guard_is_the_problems_space_limits_and_expert(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    """The module carries the space, the launch rule and the expert rule as numbers (it runs
    without codevolve): they follow the problem's when those change."""
    job_id = tiling_job(migrated_sqlite_url, INITIAL)
    module = runpy.run_path(str(_export(job_id, _db(tmp_path), tmp_path / "gemm_config.py")))
    launch_problem, expert = module["launch_problem"], module["expert_config"]
    for config in all_configs():
        assert (launch_problem(config.as_tuple()) is None) is config.launchable, config
    for m in [*range(1, 600), 1 << 20]:
        assert tuple(expert(m, 1, 1)) == expert_config(m, 1, 1).as_tuple()


@pytest.mark.parametrize(
    ("edit", "refusal"),
    [
        (
            lambda source: source + "\n\nFALLBACKS = {}\n",
            "binds FALLBACKS, which the exported module defines",
        ),
        (
            lambda source: source.replace("def choose_config(", "def pick_config("),
            "defines no choose_config",
        ),
        (
            lambda source: source.replace(
                "from typing import", "from __future__ import annotations\nfrom typing import"
            ),
            "cannot be placed in a module after its docstring: from __future__ imports must "
            "occur at the beginning of the file",
        ),
    ],
    ids=["binds-a-guard-name", "no-choose-config", "future-import"],
)
def test_a_program_the_module_cannot_hold_is_refused(
    edit: object, refusal: str, migrated_sqlite_url: str, tmp_path: Path
) -> None:
    assert callable(edit)
    job_id = tiling_job(migrated_sqlite_url, edit(INITIAL))
    out = tmp_path / "gemm_config.py"
    outcome = codevolve(
        "export", job_id, "--format", "module", "--db", _db(tmp_path), "--out", str(out)
    )
    assert outcome.returncode == 2
    assert refusal in outcome.error_line
    assert outcome.error_line.startswith(f"error: job {job_id}'s best program ")
    assert not out.exists()


def test_a_tiling_job_with_no_best_program_is_refused(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    job_id = tiling_job(migrated_sqlite_url, None)
    outcome = codevolve("export", job_id, "--format", "module", "--db", _db(tmp_path))
    assert outcome.returncode == 2
    assert f"job {job_id} has no best program yet" in outcome.error_line
