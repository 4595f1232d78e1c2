"""Loading OpenEvolve-layout bundles: content ids, validation naming the file at fault, and never
running the evaluator while loading."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from codevolve.core.errors import ConfigError
from codevolve.problems.examples import EXAMPLES, example_dir
from codevolve.problems.openevolve import (
    BundleError,
    OpenEvolveProblem,
    bundle_from_encoded,
    load_folder,
    make_bundle,
)
from codevolve.problems.openevolve.bundle import MAX_FILE_BYTES, evaluator_functions

INITIAL = b"def f():\n    return 1\n"
EVALUATOR = b"def evaluate(program_path):\n    return {'combined_score': 1.0}\n"


def minimal(**extra: bytes) -> dict[str, bytes]:
    return {"initial_program.py": INITIAL, "evaluator.py": EVALUATOR, **extra}


def write(folder: Path, files: dict[str, bytes]) -> Path:
    for path, data in files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return folder


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_examples_load_as_bundles_with_a_cascade(name: str) -> None:
    bundle = load_folder(example_dir(name))
    problem = OpenEvolveProblem(bundle)
    assert problem.name == f"bundle:{bundle.id}" and len(bundle.id) == 64
    assert [stage.name for stage in problem.stages] == ["stage1", "stage2"]
    assert problem.stages[0].threshold is not None and problem.stages[1].threshold is None
    assert "EVOLVE-BLOCK-START" in problem.initial_program


def test_the_id_follows_the_content_and_ignores_caches_and_links(tmp_path: Path) -> None:
    reads = EVALUATOR + b"POINTS = 'data/points.csv'\n"
    folder = write(
        tmp_path / "p", {**minimal(**{"data/points.csv": b"1,2\n"}), "evaluator.py": reads}
    )
    first = load_folder(folder)
    write(folder, {"__pycache__/evaluator.cpython-311.pyc": b"\x00", "x.pyc": b"\x00"})
    (folder / "link.py").symlink_to(tmp_path / "elsewhere.py")
    (tmp_path / "elsewhere.py").write_text("secret = 1\n")
    assert load_folder(folder).id == first.id
    assert set(first.files) == {"initial_program.py", "evaluator.py", "data/points.csv"}
    write(folder, {"data/points.csv": b"1,3\n"})
    assert load_folder(folder).id != first.id


def test_a_config_file_replaces_the_folders_config(tmp_path: Path) -> None:
    folder = write(tmp_path / "p", minimal(**{"config.yaml": b"max_iterations: 5\n"}))
    other = tmp_path / "other.yaml"
    other.write_text("max_iterations: 7\n")
    bundle = load_folder(folder, config=other)
    assert bundle.config_text == "max_iterations: 7\n"
    assert bundle.id != load_folder(folder).id
    assert bundle.with_config("max_iterations: 5\n").id == load_folder(folder).id


def test_the_encoded_form_round_trips() -> None:
    bundle = make_bundle(minimal(**{"blob.bin": bytes(range(256))}))
    assert bundle_from_encoded(bundle.encoded()) == bundle


@pytest.mark.parametrize(
    ("files", "at_fault"),
    [
        ({"initial_program.py": INITIAL}, "evaluator.py"),
        ({"evaluator.py": EVALUATOR}, "initial_program.py"),
        (minimal(**{"initial_program.js": b"x"}), "initial_program.js, initial_program.py"),
        (minimal(**{"../escape.py": b"x"}), "../escape.py"),
        (minimal(**{"/etc/passwd": b"x"}), "/etc/passwd"),
        (minimal(**{"a//b.py": b"x"}), "a//b.py"),
        ({**minimal(), "evaluator.py": b"def evaluate(:\n"}, "evaluator.py: does not parse"),
        ({**minimal(), "evaluator.py": b"def score(p):\n    pass\n"}, "evaluator.py: defines"),
        ({**minimal(), "evaluator.py": b"\xff\xfe"}, "evaluator.py: not UTF-8"),
        (minimal(**{"config.yaml": b"\xff"}), "config.yaml: not UTF-8"),
        (minimal(**{"big.bin": b"\x00" * (MAX_FILE_BYTES + 1)}), "big.bin"),
    ],
)
def test_malformed_bundles_are_refused_naming_the_file(
    files: dict[str, bytes], at_fault: str
) -> None:
    with pytest.raises(BundleError) as caught:
        make_bundle(files)
    assert str(caught.value).startswith(at_fault)
    assert isinstance(caught.value, ConfigError)


def test_bad_base64_names_the_file() -> None:
    encoded = {path: base64.b64encode(data).decode() for path, data in minimal().items()}
    encoded["evaluator.py"] = "not base64!"
    with pytest.raises(BundleError, match=r"^evaluator\.py: not valid base64"):
        bundle_from_encoded(encoded)


def test_a_missing_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="not a directory"):
        load_folder(tmp_path / "absent")


@pytest.mark.parametrize(
    ("source", "cascade", "expected"),
    [
        (b"def evaluate(p): ...\n", True, ("evaluate",)),
        (b"def evaluate_stage1(p): ...\ndef evaluate(p): ...\n", True, ("evaluate_stage1",)),
        (
            b"def evaluate_stage1(p): ...\ndef evaluate_stage2(p): ...\ndef evaluate(p): ...\n",
            False,
            ("evaluate",),
        ),
        (
            b"from helpers import evaluate_stage1\ndef evaluate_stage2(p): ...\n"
            b"def evaluate_stage4(p): ...\n",
            True,
            ("evaluate_stage1", "evaluate_stage2"),
        ),
        (b"evaluate = lambda p: {}\n", True, ("evaluate",)),
    ],
)
def test_evaluator_functions_are_found_by_parsing(
    source: bytes, cascade: bool, expected: tuple[str, ...]
) -> None:
    assert evaluator_functions(source.decode(), cascade=cascade) == expected


def test_loading_never_runs_the_evaluator(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evaluator = (
        f"open({str(marker)!r}, 'w').write('x')\n"
        "raise SystemExit('imported')\n"
        "def evaluate(program_path):\n    return {}\n"
    )
    folder = write(tmp_path / "p", minimal(**{"evaluator.py": evaluator.encode()}))
    problem = OpenEvolveProblem(load_folder(folder))
    assert problem.stages and not marker.exists()
