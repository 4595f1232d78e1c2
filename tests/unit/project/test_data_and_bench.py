"""The repository's run data and its lab stay small and accounted for (docs/decisions.md, "Run data
lives in data/ under a cap" and "bench/ measures; nothing there ships"): data/ under its cap with
every file named in data/README.md, the stored gemm-kernel-gpu programs still valid programs and
their sweeps readable; bench/ under a megabyte, scripts only, each named in bench/README.md, and
no test reaching into it."""

from __future__ import annotations

import json
import lzma
import re
from pathlib import Path

import pytest

from codevolve.problems.gemm_kernel_gpu.static_check import check_source

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "data"
BENCH = ROOT / "bench"
DATA_CAP_BYTES = 2 * 1024 * 1024
BENCH_CAP_BYTES = 1024 * 1024
SCRIPT_SUFFIXES = (".py", ".sh")


def _files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file())


def test_data_stays_under_its_cap() -> None:
    size = sum(path.stat().st_size for path in _files(DATA))
    assert 0 < size <= DATA_CAP_BYTES, f"data/ holds {size} bytes, over {DATA_CAP_BYTES}"


def test_every_data_file_is_named_in_its_readme() -> None:
    readme = (DATA / "README.md").read_text()
    unnamed = [
        str(path.relative_to(DATA))
        for path in _files(DATA)
        if path.name != "README.md" and f"`{path.name}`" not in readme
        and f"/{path.name}`" not in readme
    ]  # fmt: skip
    assert not unnamed, f"data/README.md does not name {unnamed}"


@pytest.mark.parametrize(
    "path", sorted((DATA / "gemm_kernel_gpu").glob("*.txt")), ids=lambda path: path.stem
)
def test_the_stored_gemm_kernel_programs_pass_the_static_check(path: Path) -> None:
    assert check_source(path.read_text()) == ""


def test_the_stored_sweeps_read_as_sweep_reports() -> None:
    sweeps = sorted((DATA / "gemm_kernel_gpu" / "sweeps").glob("*.json.xz"))
    assert len(sweeps) == 16
    for path in sweeps:
        with lzma.open(path, "rt") as compressed:
            report = json.load(compressed)
        assert report["shapes"] and report["samples"] > 0, path.name
        assert bool(report.get("heldout")) == ("heldout" in path.name), path.name


def test_bench_holds_only_listed_scripts_under_a_megabyte() -> None:
    files = _files(BENCH)
    size = sum(path.stat().st_size for path in files)
    assert size <= BENCH_CAP_BYTES, f"bench/ holds {size} bytes, over {BENCH_CAP_BYTES}"
    readme = (BENCH / "README.md").read_text()
    others = [
        str(path.relative_to(BENCH))
        for path in files
        if path.name != "README.md" and (path.parent != BENCH or path.suffix not in SCRIPT_SUFFIXES)
    ]
    assert not others, f"bench/ holds more than scripts: {others}"
    unlisted = [path.name for path in files if path.name != "README.md"]
    unlisted = [name for name in unlisted if f"`{name}`" not in readme]
    assert not unlisted, f"bench/README.md does not list {unlisted}"


# A path into bench/ built in code, or an import of a bench script; a mention in prose is fine.
REACHES_INTO_BENCH = re.compile(r"""["']bench["']|["']bench/|^\s*(from|import)\s+bench\b""", re.M)


def test_no_test_reaches_into_bench() -> None:
    reaching = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != Path(__file__).resolve() and REACHES_INTO_BENCH.search(path.read_text())
    ]
    assert not reaching, f"tests reach into bench/: {reaching}"
