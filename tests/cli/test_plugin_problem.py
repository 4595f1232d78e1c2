"""A problem of another package, installed as a plug-in: the toy of docs/add-a-problem.md.

``tests/plugins/knapsack`` is that package, written by following the guide. Installing it is
what ``pip install`` records: a dist-info folder whose entry point names its plug-in; here one is
written from the package's own pyproject.toml into a folder the command's path reaches. Then the
real ``codevolve`` runs it, the contract suite holds it to what every problem keeps, and nothing
outside its folder names it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.cli.conftest import codevolve

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "plugins" / "knapsack"


def _install(site: Path, name: str, version: str, entry_points: dict[str, str]) -> None:
    """What ``pip install`` records of a distribution: its metadata and entry points."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [f"{k} = {v}" for k, v in entry_points.items()]
    (info / "entry_points.txt").write_text("[codevolve.problems]\n" + "\n".join(lines) + "\n")


def _env(*paths: Path) -> dict[str, str]:
    """The environment with ``paths`` on the Python path, after the checkout's own."""
    path = [os.environ.get("PYTHONPATH", ""), *map(str, paths)]
    return {"PYTHONPATH": os.pathsep.join(p for p in path if p)}


@pytest.fixture
def installed(tmp_path: Path) -> dict[str, str]:
    """The toy package installed into a folder of its own: the environment that sees it."""
    project = tomllib.loads((TOY / "pyproject.toml").read_text())["project"]
    entry_points = project["entry-points"]["codevolve.problems"]
    _install(tmp_path / "site", project["name"], project["version"], entry_points)
    return _env(tmp_path / "site", TOY)


def test_the_toy_problem_runs_through_the_real_command(
    installed: dict[str, str], tmp_path: Path
) -> None:
    db = str(tmp_path / "toy.sqlite")
    run = codevolve("run", "knapsack", "--proposals", "5", "--seed", "0", "--db", db, env=installed)
    assert run.returncode == 0, run.stderr
    assert "(knapsack, seed 0)" in run.stdout + run.stderr
    assert "done, 5 proposals" in " ".join((run.stdout + run.stderr).split())
    evaluated = codevolve("evaluate", "--problem", "knapsack", env=installed)
    assert evaluated.returncode == 0, evaluated.stderr
    assert evaluated.stdout.startswith("the initial program on knapsack: evaluated, score 0.9737")


@pytest.mark.parametrize("file", ["initial_program.py", "problem.py", "__init__.py"])
def test_the_guide_shows_the_toy_as_it_is(file: str) -> None:
    guide = (ROOT / "docs" / "add-a-problem.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, flags=re.DOTALL)
    assert (TOY / "knapsack_problem" / file).read_text() in blocks
    entry_point = 'entry-points."codevolve.problems"]\nknapsack = "knapsack_problem:PLUGIN"'
    assert entry_point in guide and entry_point in (TOY / "pyproject.toml").read_text()


def test_without_the_package_the_name_is_unknown(tmp_path: Path) -> None:
    outcome = codevolve("run", "knapsack", "--proposals", "5", "--db", str(tmp_path / "x.sqlite"))
    assert outcome.returncode == 2
    assert outcome.error_line.startswith("error: unknown problem 'knapsack'")


def test_the_toy_folder_is_the_only_place_it_is_defined() -> None:
    here = Path(__file__).resolve()
    naming = [
        path.relative_to(ROOT)
        for folder in (ROOT / "src", ROOT / "tests")
        for path in folder.rglob("*")
        if path.is_file()
        and path.suffix in {".py", ".toml", ".txt", ".yaml", ".json", ".cfg"}
        and TOY not in path.parents
        and path != here
        and "knapsack" in path.read_text(errors="replace")
    ]
    assert naming == []
    assert "knapsack" not in (ROOT / "pyproject.toml").read_text()


@pytest.mark.slow
def test_the_contract_suite_holds_the_installed_toy_to_it(installed: dict[str, str]) -> None:
    contract = ROOT / "tests" / "unit" / "problems" / "test_contract.py"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-pno:cacheprovider", "-k", "knapsack", contract],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, **installed},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    per_problem = contract.read_text().count('@pytest.mark.parametrize("name", NAMES)')
    assert per_problem >= 6 and f"{per_problem} passed" in done.stdout, done.stdout


def test_a_broken_plugin_is_one_error_line(tmp_path: Path) -> None:
    _install(tmp_path / "site", "broken-problem", "1.0", {"broken": "no_such_package_xyz:PLUGIN"})
    outcome = codevolve(
        "run", "gemm-tiling", "--proposals", "5", "--db", str(tmp_path / "x.sqlite"),
        env=_env(tmp_path / "site"),
    )  # fmt: skip
    assert outcome.returncode == 2
    assert outcome.error_line.startswith(
        "error: problem plug-in 'broken' cannot be loaded (entry point broken = "
        "no_such_package_xyz:PLUGIN): ModuleNotFoundError"
    )
