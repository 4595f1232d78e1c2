"""The unit tests mirror the package: each test file sits in the folder of the package or module of
src/codevolve it tests (tests/unit/problems/gemm_tiling/ for problems/gemm_tiling/), never flat
in tests/unit/; tests of the repository as a whole (docs, data caps, import cycles) sit in
tests/unit/project/. Every folder is a package, so two test files may share a name."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "tests" / "unit"
PACKAGE = ROOT / "src" / "codevolve"
WHOLE_REPOSITORY = "project"


def misplaced(unit: Path, package: Path) -> list[str]:
    """What breaks the mirror under ``unit``, one line each: a test file flat in it, a folder that
    names no package or module of ``package``, a folder without ``__init__.py``."""
    problems = [
        f"{path.relative_to(unit)}: a test file flat in tests/unit/"
        for path in sorted(unit.glob("test_*.py"))
    ]
    for folder in sorted(p for p in unit.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        relative = folder.relative_to(unit)
        source = package / relative
        whole_repository = relative.parts[0] == WHOLE_REPOSITORY
        if not (whole_repository or source.is_dir() or source.with_suffix(".py").is_file()):
            problems.append(f"{relative}/: names no package or module of src/codevolve")
        if not (folder / "__init__.py").is_file():
            problems.append(f"{relative}/: no __init__.py")
    return problems


def test_unit_tests_mirror_the_package() -> None:
    assert misplaced(UNIT, PACKAGE) == []


def test_the_check_names_a_flat_test_an_unknown_folder_and_a_missing_init(tmp_path: Path) -> None:
    package = tmp_path / "src" / "codevolve"
    (package / "core").mkdir(parents=True)
    (package / "services" / "cli").mkdir(parents=True)
    (package / "services" / "settings.py").write_text("")
    unit = tmp_path / "tests" / "unit"
    for folder in ("core", "services/cli", "services/settings", "project/docs", "helpers", "cli"):
        (unit / folder).mkdir(parents=True)
        if folder != "cli":
            (unit / folder / "__init__.py").write_text("")
    (unit / "services" / "__init__.py").write_text("")
    (unit / "project" / "__init__.py").write_text("")
    (unit / "test_flat.py").write_text("")
    (unit / "core" / "test_fine.py").write_text("")

    assert misplaced(unit, package) == [
        "test_flat.py: a test file flat in tests/unit/",
        "cli/: names no package or module of src/codevolve",
        "cli/: no __init__.py",
        "helpers/: names no package or module of src/codevolve",
    ]
