"""Running a program's source as a module of its own behind a filter: the pieces every runner
role's loader shares (problems/<name>/device/: gemm-kernel-gpu's kernel_loader.py, KernelBench's
kb_loader.py).

The module is executed inside a runner (runner.py), the candidate's own caged process; the
device process never executes it. What keeps it in its lane there, besides the cage:

- a small table of builtins (:func:`builtins_table`: no ``open``, ``exec``, ``eval``,
  ``getattr``, ``globals``, ``type``), with an ``import`` the role's loader guards;
- :func:`dunder_problem`: a source that names a dunder attribute (``x.__class__``) or a dunder
  name other than ``__name__`` is refused before it runs: the usual ways out of a restricted
  namespace;
- the environment cut to what CUDA and Triton read (:func:`scrub_environment`).

These are a filter that gives clear messages, not the boundary: an attribute chain through a
tensor's class reaches ``os`` (tests/security/test_kernel_boundary.py), and the cage holds it.
The source is written to a file named by its SHA-256 (Triton reads a kernel's source through
``inspect``, which needs a file): :class:`SourceModules`, loaded once per hash (:func:`cached`).

Imported in runners and in the device process (stdlib only).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import tempfile
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

SAFE_BUILTINS = (
    "abs", "all", "any", "bool", "dict", "divmod", "enumerate", "float", "int", "isinstance",
    "len", "list", "max", "min", "pow", "range", "reversed", "round", "sorted", "sum", "tuple",
    "zip", "ValueError", "AssertionError", "True", "False", "None",
)  # fmt: skip
# Environment variables a process keeps once it loads programs: CUDA's, Triton's and Inductor's
# (a runner's cache folders), and where the worker's cache folder is (core/cache_dir.py).
KEPT_ENV_PREFIXES = (
    "CUDA_", "TRITON_", "TORCHINDUCTOR_", "NVIDIA_", "LD_LIBRARY_PATH", "PATH", "PYTHON", "HOME",
    "LANG", "TMPDIR", "CODEVOLVE_DEVICE_INDEX", "CODEVOLVE_CACHE_DIR", "XDG_CACHE_HOME",
)  # fmt: skip
CACHE_DIR_ENV = "CODEVOLVE_KERNEL_DIR"  # where candidate sources are written (default: a temp dir)
LOADED_LIMIT = 256  # modules kept; the oldest is dropped first

Loaded = TypeVar("Loaded")


@dataclass(frozen=True, slots=True)
class LoadError:
    """Why a source did not give a launchable entry point (a result, not an exception)."""

    message: str


def builtins_table(names: Iterable[str], guarded_import: Callable[..., Any]) -> dict[str, Any]:
    """The builtins a restricted module sees: ``names`` only, and ``import`` through
    ``guarded_import``."""
    table = {name: getattr(builtins, name) for name in names if hasattr(builtins, name)}
    table["__import__"] = guarded_import
    return table


def dunder_problem(source: str) -> str:
    """Why ``source`` is refused before it runs (a dunder attribute or name), or ""."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"syntax error, line {exc.lineno}: {exc.msg}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            return f"line {node.lineno}: attribute {node.attr!r} (private names are not allowed)"
        if isinstance(node, ast.Name) and node.id.startswith("__") and node.id != "__name__":
            return f"line {node.lineno}: name {node.id!r} is not allowed"
    return ""


def scrub_environment(environ: MutableMapping[str, str]) -> None:
    """Drop every variable CUDA and Triton do not read (secrets the worker may hold)."""
    for key in list(environ):
        if not key.startswith(KEPT_ENV_PREFIXES):
            del environ[key]


def source_digest(source: str) -> str:
    """The SHA-256 of ``source`` (hex): what its file and its cached load are named by."""
    return hashlib.sha256(source.encode()).hexdigest()


def cached(cache: dict[str, Loaded], digest: str, load: Callable[[], Loaded]) -> Loaded:
    """``cache[digest]``, loaded first when missing; past :data:`LOADED_LIMIT` entries the
    oldest is dropped."""
    if digest not in cache:
        if len(cache) >= LOADED_LIMIT:
            cache.pop(next(iter(cache)))
        cache[digest] = load()
    return cache[digest]


class SourceModules:
    """Sources run as modules of their own, each from a file of one folder named for it."""

    def __init__(
        self, directory: Path | None, *, environ: MutableMapping[str, str], suffix: str
    ) -> None:
        """The folder is ``directory``, else :data:`CACHE_DIR_ENV`'s, else a new temporary one
        (named with ``suffix``); ``environ`` is scrubbed here, before any source runs."""
        root = directory or Path(environ.get(CACHE_DIR_ENV) or tempfile.mkdtemp(suffix))
        scrub_environment(environ)
        root.mkdir(parents=True, exist_ok=True)
        self._dir = root

    def run(self, source: str, name: str, table: Any) -> dict[str, Any] | LoadError:
        """Run ``source`` as the module ``name`` with the builtins ``table`` (a dict, or the
        builtins module itself); its namespace, or what it raised as a LoadError."""
        path = self._dir / f"{name}.py"
        if not path.exists():  # named by the source's hash: a file there holds this source
            path.write_text(source)
        namespace: dict[str, Any] = {"__builtins__": table, "__name__": name, "__file__": str(path)}
        try:
            exec(compile(source, str(path), "exec"), namespace)
        except Exception as exc:  # noqa: BLE001 - the program's module: any error is a result
            return LoadError(f"loading the program raised {type(exc).__name__}: {exc}")
        return namespace
