"""``codevolve export`` refuses in one line what it cannot do: a job of a problem that no format
exports, and an ``--out`` that would replace a file the user did not say to replace."""

from __future__ import annotations

from pathlib import Path

from codevolve.problems.gemm_kernel_gpu.kernel_source import initial_program
from tests.cli.conftest import codevolve, sha256
from tests.cli.export_jobs import gemm_kernel_job


def test_a_job_of_a_problem_without_an_export_is_one_line_naming_it(
    run_db: tuple[Path, str],
) -> None:
    db, job_id = run_db  # a gemm-tiling job: it exports as a module, not as decompositions
    out = db.parent / "x.json"
    for extra in (
        ("--format", "decompositions"),
        ("--format", "decompositions", "--out", str(out)),
    ):
        outcome = codevolve("export", job_id, "--db", str(db), *extra)
        assert outcome.returncode == 2
        assert outcome.error_line == (
            f"error: job {job_id} is a job of gemm-tiling, which has no export as "
            "decompositions; `codevolve export` exports gemm-kernel-gpu jobs (--format triton), "
            "gemm-tiling, gemm-tiling-gpu and KernelBench jobs (--format module), matmul-tensor "
            f"jobs (--format decompositions); `codevolve best {job_id}` prints its best program"
        )
        assert outcome.stdout == ""
    assert not out.exists()
    json_asked = codevolve("export", job_id, "--db", str(db), "--json")
    assert json_asked.returncode == 2 and json_asked.stdout == ""
    assert json_asked.error_line == (
        f"error: --json applies to --format decompositions; job {job_id} exports as --format module"
    )
    own = codevolve("export", job_id, "--db", str(db))  # the job's own format
    assert own.returncode == 0 and "def choose_config" in own.stdout, own.stderr


def test_out_refuses_to_replace_a_file_without_force(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    job_id = gemm_kernel_job(migrated_sqlite_url, initial_program())
    db = str(tmp_path / "codevolve.sqlite")  # the file migrated_sqlite_url made
    out = tmp_path / "gemm_kernel.py"
    out.write_text("my own notes\n")
    before = sha256(out)
    refused = codevolve("export", job_id, "--format", "triton", "--db", db, "--out", str(out))
    assert refused.returncode == 2
    assert refused.error_line == (
        f"error: --out {out}: the file exists; pass --force to replace it or name another file"
    )
    assert sha256(out) == before

    forced = codevolve(
        "export", job_id, "--format", "triton", "--db", db, "--out", str(out), "--force"
    )
    assert forced.returncode == 0, forced.stderr
    assert initial_program() in out.read_text()


def test_out_naming_a_folder_is_refused(run_db: tuple[Path, str]) -> None:
    db, job_id = run_db
    outcome = codevolve("export", job_id, "--db", str(db), "--out", str(db.parent))
    assert outcome.returncode == 2
    assert outcome.error_line.startswith(f"error: --out {db.parent} is a folder; name a file")
