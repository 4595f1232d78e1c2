"""Which files of a problem folder are bundled: what the evaluator and the initial program import
or name, what ``.codevolveignore`` says, never caches or virtualenvs; the caps name the largest
files; the warning lists what was left out; the id follows only the selected content."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from codevolve.core.errors import ConfigError
from codevolve.problems.openevolve import BundleError, load_problem, select_folder
from codevolve.problems.openevolve.bundle import MAX_BUNDLE_BYTES, MAX_FILE_BYTES, make_bundle
from codevolve.problems.openevolve.ignore import IGNORE_FILE, decision, parse_rules
from codevolve.problems.openevolve.references import references
from codevolve.services.runtime.problems import load_bundle_problem

INITIAL = "# EVOLVE-BLOCK-START\nX = 1\n# EVOLVE-BLOCK-END\n"
EVALUATOR = """\
import json
import os
from pathlib import Path

import numpy as np

import helpers
from pkg.sub import thing

HERE = Path(__file__).parent


def evaluate(program_path):
    points = np.load(HERE / "data" / "points.npy")
    meta = json.load(open("data/meta.json"))
    return {"combined_score": 1.0}


if __name__ == "__main__":
    print(evaluate("best_program.py"))
"""
HELPERS = """\
import os

def table(i):
    return open(os.path.join(os.path.dirname(__file__), "tables", f"{i}.csv"))
"""


def write(folder: Path, files: dict[str, bytes | str]) -> Path:
    for path, data in files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            target.write_text(data)
        else:
            target.write_bytes(data)
    return folder


def sized(folder: Path, path: str, size: int) -> None:
    """A file of ``size`` bytes that takes no disk (the caps read sizes, never the bytes)."""
    target = folder / path
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        out.truncate(size)


NEEDED = {
    "initial_program.py": INITIAL,
    "evaluator.py": EVALUATOR,
    "config.yaml": "max_iterations: 5\n",
    "helpers.py": HELPERS,
    "pkg/__init__.py": "",
    "pkg/sub.py": "from . import sub2\nthing = sub2.VALUE\n",
    "pkg/sub2.py": "VALUE = 2\n",
    "data/points.npy": b"\x93NUMPY" + bytes(100),
    "data/meta.json": "{}\n",
    "tables/1.csv": "1,2\n",
    "tables/2.csv": "3,4\n",
}
JUNK = {
    "best_program.py": "X = 9\n",
    "config_phase_1.yaml": "max_iterations: 50\n",
    "README.md": "notes\n",
    "tables/plot.png": b"\x89PNG" + bytes(1000),
    "pkg/unused.py": "Y = 1\n",
    "openevolve_output/best/best_program.py": "X = 8\n",
    "openevolve_output/logs/run.log": "log\n",
    ".git/HEAD": "ref: refs/heads/main\n",
    "__pycache__/evaluator.cpython-311.pyc": b"\x00",
    "venv/pyvenv.cfg": "home = /usr/bin\n",
    "venv/lib/site.py": "x = 1\n",
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    folder = write(tmp_path / "problem", {**NEEDED, **JUNK})
    sized(folder, "data/unused.npy", 3 << 20)
    sized(folder, "plot.png", 2 << 20)
    return folder


def test_only_what_the_evaluator_imports_or_names_is_bundled(folder: Path) -> None:
    selection = select_folder(folder)
    assert set(selection.bundle.files) == set(NEEDED)


def test_the_warning_lists_what_was_left_out_largest_first_with_the_total(folder: Path) -> None:
    warning = select_folder(folder).warning()
    assert warning is not None and "\n" not in warning
    assert warning.startswith("left out of the bundle: 9 files (5.0 MiB)")
    assert warning.index("data/unused.npy (3.0 MiB, not referenced)") < warning.index(
        "plot.png (2.0 MiB, image)"
    )
    assert "openevolve_output/ (2 files, " in warning and "earlier output" in warning
    assert "and 2 more" in warning and f'"!PATH" to {folder / IGNORE_FILE}' in warning
    assert ".git" not in warning and "venv" not in warning and "pycache" not in warning


def test_a_config_of_the_folder_given_with_config_is_not_reported_as_left_out(
    folder: Path,
) -> None:
    selection = select_folder(folder, config=folder / "config_phase_1.yaml")
    assert selection.bundle.config_text == "max_iterations: 50\n"
    assert "config_phase_1" not in (selection.warning() or "")


def test_nothing_left_out_means_no_warning(tmp_path: Path) -> None:
    folder = write(tmp_path / "p", {k: v for k, v in NEEDED.items()})
    assert select_folder(folder).warning() is None


def test_the_id_follows_the_selected_content_only(folder: Path, tmp_path: Path) -> None:
    first = select_folder(folder).bundle
    clean = write(tmp_path / "clean", dict(NEEDED))
    assert select_folder(clean).bundle.id == first.id  # the junk changes nothing
    write(folder, {"README.md": "other notes\n", "best_program.py": "X = 10\n"})
    assert select_folder(folder).bundle.id == first.id
    write(folder, {"data/meta.json": '{"a": 1}\n'})
    assert select_folder(folder).bundle.id != first.id


def test_codevolveignore_leaves_out_and_puts_in(folder: Path) -> None:
    write(folder, {IGNORE_FILE: "# tables are rebuilt\ntables/\n!tables/2.csv\n!README.md\n"})
    files = set(select_folder(folder).bundle.files)
    assert files == (set(NEEDED) - {"tables/1.csv"}) | {"README.md"}
    assert IGNORE_FILE not in files


def test_codevolveignore_cannot_drop_the_required_files(folder: Path) -> None:
    write(folder, {IGNORE_FILE: "*.py\n*.yaml\n"})
    files = set(select_folder(folder).bundle.files)
    assert files == {"initial_program.py", "evaluator.py", "config.yaml", "data/points.npy",
                     "data/meta.json"}  # fmt: skip


def test_a_bad_codevolveignore_line_is_named(folder: Path) -> None:
    write(folder, {IGNORE_FILE: "ok.txt\n!\n"})
    with pytest.raises(BundleError, match=r"\.codevolveignore: line 2: '!' names no file$"):
        select_folder(folder)


def test_a_referenced_file_over_the_cap_is_named_with_the_line_that_excludes_it(
    tmp_path: Path,
) -> None:
    evaluator = "def evaluate(path):\n    open('data/big.npy')\n    return {}\n"
    folder = write(tmp_path / "p", {"initial_program.py": INITIAL, "evaluator.py": evaluator})
    sized(folder, "data/big.npy", MAX_FILE_BYTES + 1)
    with pytest.raises(BundleError) as caught:
        select_folder(folder)
    message = str(caught.value)
    assert message.startswith("data/big.npy: 8.0 MiB, more than the 8.0 MiB one bundle file")
    assert "(evaluator.py refers to it)" in message
    assert f'add the line "/data/big.npy" to {folder / IGNORE_FILE}' in message
    assert "\n" not in message and isinstance(caught.value, ConfigError)


def test_a_selection_over_the_total_cap_names_its_largest_files(tmp_path: Path) -> None:
    evaluator = "def evaluate(path):\n    open('data/a.bin')\n    return {}\nDATA = 'data'\n"
    folder = write(tmp_path / "p", {"initial_program.py": INITIAL, "evaluator.py": evaluator})
    for name in ("a", "b", "c"):
        sized(folder, f"data/{name}.bin", MAX_BUNDLE_BYTES // 3 + 1)
    with pytest.raises(BundleError) as caught:
        select_folder(folder)
    message = str(caught.value)
    assert message.startswith(f"{folder}: the selected files come to 16.0 MiB, more than the")
    assert "data/a.bin (5.3 MiB, evaluator.py refers to it)" in message
    assert "data/b.bin (5.3 MiB, evaluator.py refers to folder data)" in message
    assert f'such as "/data/a.bin" in {folder / IGNORE_FILE}' in message


def test_a_worker_reads_back_every_stored_file(tmp_path: Path) -> None:
    # An explicitly included file is in the stored bundle, but .codevolveignore is not: the
    # worker's copy must keep it all and so keep the id.
    files = {"initial_program.py": INITIAL.encode(), "evaluator.py": EVALUATOR.encode()}
    bundle = make_bundle({**files, "notes/extra.txt": b"x", "best_program.py": b"X = 1\n"})
    written = write(tmp_path / bundle.id, dict(bundle.files))
    assert load_problem(written).bundle.id == bundle.id
    resolved = load_bundle_problem(bundle.id, bundle.files, tmp_path / "cache")
    assert resolved.name == bundle.name


@pytest.mark.parametrize(
    ("pattern", "path", "matched"),
    [
        ("*.png", "a/b/c.png", True),
        ("*.png", "c.png.txt", False),
        ("/c.png", "a/c.png", False),
        ("a/*.txt", "a/x.txt", True),
        ("a/*.txt", "a/b/x.txt", False),
        ("a/**/x.txt", "a/b/c/x.txt", True),
        ("a/**/x.txt", "a/x.txt", True),
        ("**/out", "q/out/f", True),
        ("out/", "q/out/f", True),
        ("out/", "q/out", False),  # a file named out, not a folder
        ("data/**", "data/a/b", True),
        ("file[0-9].npy", "file7.npy", True),
        ("file[!0-9].npy", "file7.npy", False),
        ("?.txt", "ab.txt", False),
        ("\\#x", "#x", True),
    ],
)
def test_ignore_patterns_follow_gitignore(pattern: str, path: str, matched: bool) -> None:
    assert (decision(parse_rules(pattern), path) is not None) is matched


def test_the_last_matching_ignore_line_wins() -> None:
    rules = parse_rules("data/\n!data/keep.npy\n*.tmp\n!/x.tmp\n")
    found = {
        path: decision(rules, path) for path in ("data/a", "data/keep.npy", "x.tmp", "y/x.tmp")
    }
    assert {path: rule.include for path, rule in found.items() if rule is not None} == {
        "data/a": False,
        "data/keep.npy": True,
        "x.tmp": True,
        "y/x.tmp": False,
    }


@pytest.mark.parametrize(
    ("source", "paths", "folders", "modules"),
    [
        ("open('data/x.json')", {"data/x.json"}, set(), set()),
        ("Path(__file__).parent / 'data' / 'x.npy'", {"data/x.npy"}, set(), set()),
        ("os.path.join(here, 'data', name)", set(), {"data"}, set()),
        ("os.path.join(here, 'd', f'case_{i}.npy')", set(), {"d"}, set()),
        ("f'runs/{i}/out.txt'", set(), {"runs"}, set()),
        ("'tables/' + name", set(), {"tables"}, set()),
        ("Path('a').joinpath('b', 'c.txt')", {"a/b/c.txt"}, set(), set()),
        ("', '.join(['x', 'y'])", {", ", "x", "y"}, set(), {"x", "y"}),
        ("import a.b.c", set(), set(), {"a", "a.b", "a.b.c"}),
        ("from . import sub", set(), set(), {"pkg", "pkg.sub"}),
        ("from ..up import f", set(), set(), {"up", "up.f"}),
        ("importlib.import_module('helpers')", {"helpers"}, set(), {"helpers"}),
        ("if __name__ == '__main__':\n    open('best_program.py')", set(), set(), set()),
    ],
)
def test_references_are_found_by_parsing(
    source: str, paths: set[str], folders: set[str], modules: set[str]
) -> None:
    found = references(ast.parse(source), package="pkg")
    assert found.paths == paths
    assert found.folders == folders
    assert found.modules - {"importlib"} == modules
