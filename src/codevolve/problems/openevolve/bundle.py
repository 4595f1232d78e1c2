"""A problem bundle: the files of an OpenEvolve-layout folder, as one immutable value.

A bundle is ``initial_program.<ext>``, ``evaluator.py`` and ``config.yaml`` (optional) plus any
helper modules and data files the evaluator reads; or, for a KernelBench-format problem,
``initial_program.py``, ``reference.py`` and ``kernelbench.json`` (problems/kernelbench/spec.py).
Its id is the sha256 of its paths and bytes, so
the same selected files always name the same problem (``bundle:<id>``) and are stored once.
Which files of a user's folder are selected is decided in ``selection.py``.

A key written in ``config.yaml`` (``llm.api_key``) is replaced there by a reference to a
variable before the bundle is made (``api_keys.py``): no bundle holds one.

Loading validates what a worker will rely on (required files present, paths relative and
inside the bundle, sizes bounded, text files UTF-8, ``evaluator.py`` defines ``evaluate`` or
``evaluate_stage1``) and raises :class:`BundleError` naming the file at fault. Nothing here runs
or imports the evaluator: it is user code and only the sandbox executes it.
"""

from __future__ import annotations

import ast
import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType

from codevolve.core.errors import ConfigError
from codevolve.core.pysource import parse_python
from codevolve.problems.kernelbench.spec import SPEC_FILE, make_spec, spec_of_files
from codevolve.problems.openevolve.api_keys import literal_keys, without_keys

EVALUATOR = "evaluator.py"
CONFIG = "config.yaml"
# A KernelBench problem's bundle holds this instead of an evaluator: its judge is trusted code of
# the workers, and the bundle carries the user's reference and settings (problems/kernelbench/).
KERNEL_SPEC = SPEC_FILE  # a KernelBench problem's settings: the file marks a kernel bundle
INITIAL_STEM = "initial_program"
MAX_FILES = 256
# bytes, one file; the sandbox lets a call write files this large (evaluator_workers/_cage.py
# FILE_BYTES), since the evaluator harness writes the bundle's files there.
MAX_FILE_BYTES = 8 << 20
MAX_BUNDLE_BYTES = 16 << 20  # bytes, all files together
MAX_STAGES = 3  # evaluate_stage1 .. evaluate_stage3, as OpenEvolve calls them
NAME_PREFIX = "bundle:"


class BundleError(ConfigError):
    """A bundle is malformed; the message names the file (and field) at fault."""


@dataclass(frozen=True, slots=True)
class Bundle:
    """The files of a problem folder, relative POSIX path -> bytes; see :func:`make_bundle`."""

    files: Mapping[str, bytes] = field(repr=False)
    id: str  # sha256 hex of the sorted (path, bytes) pairs
    initial_path: str  # e.g. "initial_program.py"

    @property
    def name(self) -> str:
        """The problem name a job's config carries: ``bundle:<sha256>``."""
        return f"{NAME_PREFIX}{self.id}"

    @property
    def size_bytes(self) -> int:
        return sum(len(data) for data in self.files.values())

    @property
    def suffix(self) -> str:
        """The initial program's suffix (``.py``): candidates are written with it."""
        return PurePosixPath(self.initial_path).suffix

    def text(self, path: str) -> str:
        return self.files[path].decode("utf-8")

    @property
    def initial_program(self) -> str:
        return self.text(self.initial_path)

    @property
    def config_text(self) -> str:
        """``config.yaml``; empty when the bundle has none."""
        return self.text(CONFIG) if CONFIG in self.files else ""

    def with_config(self, text: str) -> Bundle:
        """The same bundle with ``config.yaml`` replaced (``--config FILE``); a new id."""
        files = dict(self.files)
        files[CONFIG] = text.encode("utf-8")
        return make_bundle(files)

    def encoded(self) -> dict[str, str]:
        """The files as path -> base64, the stored and uploaded form."""
        return {path: base64.b64encode(data).decode("ascii") for path, data in self.files.items()}


def bundle_id(files: Mapping[str, bytes]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        data = files[path]
        # Lengths first: no concatenation of two bundles' paths and bytes can collide.
        digest.update(f"{len(path.encode())}:{path}:{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()


def make_bundle(files: Mapping[str, bytes]) -> Bundle:
    """Validate ``files`` (path -> bytes) and return the bundle; BundleError names the fault."""
    if len(files) > MAX_FILES:
        raise BundleError(f"a bundle holds at most {MAX_FILES} files, this one {len(files)}")
    checked: dict[str, bytes] = {}
    total = 0
    for path, data in files.items():
        clean = _checked_path(path)
        if clean in checked:
            raise BundleError(f"{path}: appears twice in the bundle")
        if len(data) > MAX_FILE_BYTES:
            raise BundleError(f"{path}: {len(data)} bytes, more than {MAX_FILE_BYTES} per file")
        total += len(data)
        checked[clean] = bytes(data)
    if total > MAX_BUNDLE_BYTES:
        raise BundleError(f"the bundle is {total} bytes, more than {MAX_BUNDLE_BYTES}")
    initial = _initial_path(checked)
    _check_text(checked, initial)
    if KERNEL_SPEC in checked:
        for path in checked:
            _check_text(checked, path)
        _check_kernel_bundle(checked)
        frozen = MappingProxyType(dict(sorted(checked.items())))
        return Bundle(files=frozen, id=bundle_id(frozen), initial_path=initial)
    if EVALUATOR not in checked:
        raise BundleError(f"{EVALUATOR}: missing; a bundle needs it beside {initial}")
    _check_text(checked, EVALUATOR)
    evaluator_functions(checked[EVALUATOR].decode("utf-8"))  # raises when unusable
    if CONFIG in checked:
        _check_text(checked, CONFIG)
        checked[CONFIG] = _keys_taken_out(checked[CONFIG].decode("utf-8")).encode("utf-8")
    frozen = MappingProxyType(dict(sorted(checked.items())))
    return Bundle(files=frozen, id=bundle_id(frozen), initial_path=initial)


def _keys_taken_out(config: str) -> str:
    """``config.yaml`` without the API keys written in it (``api_keys.py``): a bundle is stored
    and shipped to sandboxes, a key never is."""
    text = without_keys(config)
    if literal_keys(text):
        raise BundleError(
            f"{CONFIG}: an llm api_key could not be taken out of the text; write "
            "it as a plain quoted string, or as ${VARIABLE} naming where it is"
        )
    return text


def bundle_from_encoded(files: Mapping[str, str]) -> Bundle:
    """A bundle from path -> base64 (an upload or a stored row)."""
    decoded: dict[str, bytes] = {}
    for path, text in files.items():
        if not isinstance(text, str):
            raise BundleError(f"{path}: expected base64 text, got {type(text).__name__}")
        try:
            decoded[path] = base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise BundleError(f"{path}: not valid base64 ({exc})") from exc
    return make_bundle(decoded)


def read_folder(path: Path) -> Bundle:
    """The bundle written to ``path`` from stored files (a worker's copy): every regular file,
    as it is. A problem folder of a user goes through ``selection.select_folder`` instead."""
    files = {
        file.relative_to(path).as_posix(): file.read_bytes()
        for file in sorted(path.rglob("*"))
        if file.is_file() and not file.is_symlink()
    }
    return make_bundle(files)


def evaluator_functions(source: str, *, cascade: bool = True) -> tuple[str, ...]:
    """The evaluation functions of ``evaluator.py`` to call in order, found by parsing it.

    With ``cascade`` and a top-level ``evaluate_stage1``: the consecutive stages from 1 (at most
    3), as OpenEvolve runs them; otherwise ``("evaluate",)``. BundleError when neither exists.
    """
    try:
        tree = parse_python(source, filename=EVALUATOR)
    except (SyntaxError, ValueError) as exc:
        raise BundleError(f"{EVALUATOR}: does not parse: {exc}") from exc
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            defined.update(alias.asname or alias.name for alias in node.names)
    stages: list[str] = []
    for number in range(1, MAX_STAGES + 1):
        if f"evaluate_stage{number}" not in defined:
            break
        stages.append(f"evaluate_stage{number}")
    if "evaluate" in defined and not (cascade and stages):
        return ("evaluate",)
    if not stages:
        raise BundleError(f"{EVALUATOR}: defines neither evaluate() nor evaluate_stage1()")
    return tuple(stages)


def _checked_path(path: str) -> str:
    if not isinstance(path, str) or not path or "\\" in path or "\x00" in path:
        raise BundleError(f"{path!r}: not a relative POSIX path")
    pure = PurePosixPath(path)
    if pure.is_absolute() or any(part in ("..", ".", "") for part in path.split("/")):
        raise BundleError(f"{path}: must be a relative path inside the bundle")
    return pure.as_posix()


def _initial_path(files: Mapping[str, bytes]) -> str:
    found = sorted(p for p in files if "/" not in p and PurePosixPath(p).stem == INITIAL_STEM)
    if not found:
        raise BundleError(f"{INITIAL_STEM}.py: missing; a bundle needs an initial program")
    if len(found) > 1:
        raise BundleError(f"{', '.join(found)}: more than one initial program")
    return found[0]


def _check_kernel_bundle(files: Mapping[str, bytes]) -> None:
    """A KernelBench bundle (an upload may carry anything): its settings read, its reference is
    in the format and keeps the rules, and its initial program is the one built from it."""
    try:
        spec = spec_of_files(files)
        rebuilt = make_spec(spec.reference, name=spec.name, settings=spec.settings)
    except ConfigError as exc:
        raise BundleError(str(exc)) from exc
    if rebuilt.initial_program != spec.initial_program:
        raise BundleError(
            f"{INITIAL_STEM}.py: not the program built from the reference; a kernel bundle's "
            "initial program is the reference's Model copied as ModelNew"
        )


def _check_text(files: Mapping[str, bytes], path: str) -> None:
    try:
        files[path].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path}: not UTF-8 text ({exc})") from exc
