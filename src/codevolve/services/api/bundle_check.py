"""Checks of an uploaded problem bundle before anything is stored.

The bundle is the OpenEvolve layout: ``initial_program.py``, ``evaluator.py``, ``config.yaml`` and
optional helper files. The service process never imports or runs the evaluator (it runs on
workers, in the sandbox). Here the upload is checked in two steps: the API's own limits (paths,
base64, the total size, which answers 413) and that Python files parse and ``config.yaml`` is a
YAML mapping, each problem reported with its path; then the OpenEvolve loader's checks
(:func:`~codevolve.problems.openevolve.bundle.make_bundle`: the layout, an ``evaluate`` function).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from codevolve.core.errors import ConfigError
from codevolve.problems.openevolve.bundle import (
    MAX_BUNDLE_BYTES,  # decoded, all files together: the loader's limit, answered here as a 413
    Bundle,
    BundleError,
    make_bundle,
)

MAX_FILES = 64
MAX_PATH_LENGTH = 200  # characters


@dataclass(frozen=True, slots=True)
class BundleProblem:
    """One thing wrong with a bundle; ``path`` is the file at fault (empty: the whole bundle)."""

    path: str
    message: str
    too_large: bool = False


class BundleRejected(ConfigError):
    """The bundle is malformed or too large; ``problems`` says where."""

    def __init__(self, problems: list[BundleProblem]) -> None:
        super().__init__("; ".join(f"{p.path or 'bundle'}: {p.message}" for p in problems))
        self.problems = problems

    @property
    def too_large(self) -> bool:
        return any(p.too_large for p in self.problems)


def decode_bundle(encoded: Mapping[str, str]) -> dict[str, bytes]:
    """The bundle's files as bytes, checked; :class:`BundleRejected` lists every problem."""
    problems: list[BundleProblem] = []
    if len(encoded) > MAX_FILES:
        raise BundleRejected([BundleProblem("", f"{len(encoded)} files; at most {MAX_FILES}")])
    files: dict[str, bytes] = {}
    for path, text in encoded.items():
        reason = _bad_path(path)
        if reason:
            problems.append(BundleProblem(path, reason))
            continue
        try:
            files[path] = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            problems.append(BundleProblem(path, "not valid base64"))
    total = sum(len(data) for data in files.values())
    if total > MAX_BUNDLE_BYTES:
        message = f"{total} bytes; the limit is {MAX_BUNDLE_BYTES} bytes"
        raise BundleRejected([BundleProblem("", message, too_large=True)])
    problems += [p for path, data in files.items() if (p := _check_file(path, data)) is not None]
    if problems:
        raise BundleRejected(problems)
    return files


def load_bundle(encoded: Mapping[str, str]) -> Bundle:
    """The checked bundle of an upload; :class:`BundleRejected` says what is wrong with it."""
    files = decode_bundle(encoded)
    try:
        return make_bundle(files)
    except BundleError as error:
        # The loader's message starts with the file at fault, when there is one.
        by_length = sorted(files, key=len, reverse=True)
        path = next((p for p in by_length if str(error).startswith(p)), "")
        raise BundleRejected([BundleProblem(path, str(error))]) from error


def _bad_path(path: str) -> str:
    parts = path.split("/")
    if not path or len(path) > MAX_PATH_LENGTH:
        return f"a path must have 1 to {MAX_PATH_LENGTH} characters"
    if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        return "a path must be relative, with '/' separators and no '.' or '..' parts"
    if not all(c.isprintable() for c in path):
        return "a path must be printable"
    return ""


def _check_file(path: str, data: bytes) -> BundleProblem | None:
    if path.endswith((".py", ".yaml", ".yml")):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return BundleProblem(path, "not UTF-8 text")
        if path.endswith(".py"):
            try:
                compile(text, path, "exec", dont_inherit=True)  # parses; runs nothing
            except (SyntaxError, ValueError) as error:
                return BundleProblem(path, f"does not parse: {error}")
            except (RecursionError, MemoryError):  # e.g. a million nested unary minus signs
                return BundleProblem(path, "does not parse: nested too deeply")
        elif path == "config.yaml":
            try:
                config = yaml.safe_load(text)
            except yaml.YAMLError as error:
                return BundleProblem(path, f"not valid YAML: {error}")
            except RecursionError:  # the pure-Python loader recurses per nesting level
                return BundleProblem(path, "not valid YAML: nested too deeply")
            if config is not None and not isinstance(config, dict):
                return BundleProblem(path, "must be a YAML mapping")
    return None
