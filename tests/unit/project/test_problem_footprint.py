"""A problem lives in its folder: no file of the package outside ``problems/<name>/`` names it,
and pyproject.toml names it on its entry-point line only (docs/decisions.md, 24 and 26). So
re-adding a problem touches its folder and one line, and the generic layers (queue, sandbox,
device processes, the judging boundary) never name one. Tests and docs may name any problem.

The exceptions are listed here, each with why, and a stale one fails too: the list only shrinks.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "src" / "codevolve"
ENTRY_POINTS = "codevolve.problems"
TEXT_SUFFIXES = {".py", ".txt", ".yaml", ".json", ".html", ".css", ".js", ".ini", ".mako"}

# A problem built on another's pieces names it from inside its own folder.
BUILT_ON = {
    "gemm_tiling": ("problems/gemm_kernel_gpu/", "problems/gemm_tiling_gpu/"),
    # gemm-kernel-gpu's initial program is gemm-tiling-gpu's evolved kernel (its data file).
    "gemm_tiling_gpu": ("problems/gemm_kernel_gpu/problem.py",),
}
# The `kernelbench` set command stays a command of services/ (argparse lives only there); it
# reaches KernelBench only through its plug-in (problem-file reader, results page). The folder
# route (problems/openevolve) builds KernelBench bundles from the files users bring.
SERVICES_EXCEPTIONS = {
    "kernelbench": (
        "problems/openevolve/bundle.py",
        "problems/openevolve/loaded.py",
        "services/cli/__init__.py",
        "services/cli/kernelbench.py",
    ),
}


def registered(pyproject: Path) -> dict[str, str]:
    """{problem package: its entry-point line} of the problems pyproject.toml registers."""
    data = tomllib.loads(pyproject.read_text())
    found = {}
    for name, target in data["project"]["entry-points"][ENTRY_POINTS].items():
        module = target.partition(":")[0]
        found[module.rpartition(".")[2]] = f'{name} = "{target}"'
    return found


def footprint(package: Path, pyproject: Path, problem: str, entry_line: str) -> list[str]:
    """Where ``problem`` (a package name) is named outside its folder: one line per file of
    ``package``, and per line of ``pyproject`` other than ``entry_line`` and the import
    contracts' listed edges (``a -> b``, which lint-imports checks)."""
    word = re.compile(rf"(?<!docs/)\b{re.escape(problem)}\b")  # a page of docs/ is no code
    own = package / "problems" / problem
    hits = []
    for path in sorted(package.rglob("*")):
        if not path.is_file() or path.suffix not in TEXT_SUFFIXES or own in path.parents:
            continue
        if word.search(path.read_text(errors="replace")):
            hits.append(path.relative_to(package).as_posix())
    for number, line in enumerate(pyproject.read_text().splitlines(), 1):
        if word.search(line) and line.strip() != entry_line and " -> " not in line:
            hits.append(f"pyproject.toml:{number}")
    return hits


def allowed(problem: str, where: str) -> bool:
    listed = BUILT_ON.get(problem, ()) + SERVICES_EXCEPTIONS.get(problem, ())
    return any(
        where == entry or (entry.endswith("/") and where.startswith(entry)) for entry in listed
    )


def test_no_file_outside_a_problems_folder_names_it() -> None:
    pyproject = ROOT / "pyproject.toml"
    problems = registered(pyproject)
    assert problems, "no problem is registered in pyproject.toml"
    unlisted = [
        f"{problem}: {where}"
        for problem, entry_line in sorted(problems.items())
        for where in footprint(PACKAGE, pyproject, problem, entry_line)
        if not allowed(problem, where)
    ]
    assert unlisted == []


def test_every_listed_exception_is_still_needed() -> None:
    pyproject = ROOT / "pyproject.toml"
    problems = registered(pyproject)
    stale = []
    for listing in (BUILT_ON, SERVICES_EXCEPTIONS):
        for problem, entries in listing.items():
            hits = footprint(PACKAGE, pyproject, problem, problems[problem])
            for entry in entries:
                if not any(allowed_by(entry, where) for where in hits):
                    stale.append(f"{problem}: {entry}")
    assert stale == []


def allowed_by(entry: str, where: str) -> bool:
    return where == entry or (entry.endswith("/") and where.startswith(entry))


def test_the_check_names_a_generic_module_and_a_pyproject_line(tmp_path: Path) -> None:
    package = tmp_path / "codevolve"
    (package / "problems" / "toy").mkdir(parents=True)
    (package / "problems" / "toy" / "__init__.py").write_text(
        "from codevolve.problems.toy import x\n"
    )
    (package / "evaluator_workers").mkdir()
    (package / "evaluator_workers" / "jobs.py").write_text('JOB = "codevolve.problems.toy.jobs"\n')
    (package / "core").mkdir()
    (package / "core" / "fine.py").write_text("TOY = 'toy_problem, docs/toy.md: no names'\n")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project.entry-points."codevolve.problems"]\ntoy = "codevolve.problems.toy:PLUGIN"\n'
        '[tool.x]\nfiles = ["src/codevolve/problems/toy/initial_program.py"]\n'
    )
    entry_line = registered(pyproject)["toy"]

    assert footprint(package, pyproject, "toy", entry_line) == [
        "evaluator_workers/jobs.py",
        "pyproject.toml:4",
    ]
