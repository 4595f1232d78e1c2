"""Runs one function of a bundle's ``evaluator.py`` on a candidate, inside a sandboxed child.

This file is never imported by codevolve: its text is sent to the sandbox, which loads it in a
fresh forked child and calls :func:`run_evaluator`. Only there is user code (the evaluator, its
helpers, the candidate) executed. Standard library only.

What an OpenEvolve evaluator expects is set up first: the bundle's files in a folder of their own,
on ``sys.path`` and as the working directory; ``openevolve.evaluation_result.EvaluationResult``
importable (a stand-in, registered in this process only, unless a real ``openevolve`` is
installed); the candidate written to a temp file with the initial program's suffix. The result
comes back as plain data: metrics (numbers, booleans, text; non-finite numbers listed apart, as
JSON cannot hold them), artifacts as text, or the evaluator's error with its traceback.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import math
import numbers
import os
import sys
import types
from typing import Any

# asyncio and traceback are imported where needed: each costs a sandboxed child tens of ms.

PROBLEM_DIR = "problem"  # the bundle's folder, below the child's own temp dir
MAX_TEXT_CHARS = 20_000  # characters kept of one artifact or text metric
TRACEBACK_CHARS = 6_000


def run_evaluator(
    files: dict[str, str], evaluator: str, function: str, program: str, suffix: str
) -> dict[str, Any]:
    """Call ``function(program_path)`` of ``evaluator`` (a path in ``files``, path -> base64)."""
    home = os.getcwd()
    folder = os.path.join(home, PROBLEM_DIR)
    for path, data in files.items():
        target = os.path.join(folder, *path.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as out:
            out.write(base64.b64decode(data))
    program_path = os.path.join(home, f"program{suffix}")  # the child's own, fresh directory
    with open(program_path, "x", encoding="utf-8") as source:
        source.write(program)
    sys.path.insert(0, folder)
    os.chdir(folder)
    # A process started with multiprocessing's "spawn" re-imports __main__, here the sandbox's
    # server, which it cannot read: an empty __main__ stands in, as for an interactive session.
    sys.modules["__main__"] = types.ModuleType("__main__")
    _provide_evaluation_result()
    try:
        module = _load(os.path.join(folder, *evaluator.split("/")))
        entry = getattr(module, function, None)
        if not callable(entry):
            return _error(f"{evaluator} has no function {function}()", "")
        result = entry(program_path)
        if hasattr(result, "__await__"):
            import asyncio

            result = asyncio.run(_awaited(result))
    except BaseException as exc:  # noqa: BLE001 - what the evaluator raises is its result here
        import traceback

        text = "".join(traceback.format_exception(exc))
        message = f"{function} raised {type(exc).__name__}: {exc}{_sandbox_hint(exc, text)}"
        return _error(message, text[-TRACEBACK_CHARS:])
    return _plain_result(result, function)


def _sandbox_hint(exc: BaseException, trace: str) -> str:
    """Why the sandbox refused, for the refusals an evaluator written for OpenEvolve may meet."""
    if not isinstance(exc, PermissionError):
        return ""
    if "_execute_child" in trace or "spawnv_passfds" in trace:
        return " (the sandbox lets an evaluator execute only the interpreter, sys.executable)"
    if "SemLock" in trace or "shm_open" in trace:
        return (
            " (multiprocessing needs POSIX semaphores in /dev/shm, which this worker's sandbox"
            " does not offer: a worker running as root gives each sandbox a /dev/shm of its own)"
        )
    return ""


async def _awaited(result: Any) -> Any:
    return await result


def _load(path: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("evaluator", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluator"] = module  # pickling (multiprocessing) looks the module up by name
    spec.loader.exec_module(module)
    return module


def _provide_evaluation_result() -> None:
    """Make ``from openevolve.evaluation_result import EvaluationResult`` work, here only."""
    if importlib.util.find_spec("openevolve") is not None:
        return  # a real openevolve is installed: its own class is used
    package = types.ModuleType("openevolve")
    package.__path__ = []
    submodule = types.ModuleType("openevolve.evaluation_result")

    @dataclasses.dataclass
    class EvaluationResult:
        metrics: dict[str, Any]
        artifacts: dict[str, Any] = dataclasses.field(default_factory=dict)

        @classmethod
        def from_dict(cls, metrics: dict[str, Any]) -> EvaluationResult:
            return cls(metrics=metrics)

        def to_dict(self) -> dict[str, Any]:
            return self.metrics

        def has_artifacts(self) -> bool:
            return bool(self.artifacts)

        def get_artifact_keys(self) -> list[str]:
            return list(self.artifacts)

        def get_artifact_size(self, key: str) -> int:
            value = self.artifacts.get(key)
            if value is None:
                return 0
            return len(value) if isinstance(value, bytes) else len(str(value).encode())

        def get_total_artifact_size(self) -> int:
            return sum(self.get_artifact_size(key) for key in self.artifacts)

    EvaluationResult.__module__ = submodule.__name__
    submodule.EvaluationResult = EvaluationResult  # type: ignore[attr-defined]
    package.evaluation_result = submodule  # type: ignore[attr-defined]
    sys.modules["openevolve"] = package
    sys.modules["openevolve.evaluation_result"] = submodule


def _plain_result(result: Any, function: str) -> dict[str, Any]:
    artifacts: Any = {}
    if isinstance(result, dict):
        metrics = result
    elif isinstance(getattr(result, "metrics", None), dict):
        metrics = result.metrics
        artifacts = getattr(result, "artifacts", None) or {}
        if not isinstance(artifacts, dict):
            artifacts = {"artifacts": artifacts}
    else:
        kind = type(result).__name__
        return _error(f"{function} returned a {kind}, not a dict or an EvaluationResult", "")
    plain: dict[str, Any] = {}
    nonfinite: dict[str, str] = {}
    for key, value in metrics.items():
        name = str(key)
        number = _number(value)
        if isinstance(number, bool):
            plain[name] = number
        elif isinstance(number, float):
            if math.isfinite(number):
                plain[name] = number
            else:
                nonfinite[name] = repr(number)
        else:
            plain[name] = _text(value)
    return {
        "metrics": plain,
        "nonfinite": nonfinite,
        "artifacts": {str(key): _text(value) for key, value in artifacts.items()},
        "error": None,
        "traceback": "",
    }


def _number(value: Any) -> bool | float | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str | bytes | complex) or not hasattr(value, "__float__"):
        return None
    try:  # e.g. a 0-d array
        return float(value)
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        text = value.decode("utf-8", errors="replace")
    else:
        text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + "\n[truncated]"


def _error(message: str, trace: str) -> dict[str, Any]:
    return {"metrics": {}, "nonfinite": {}, "artifacts": {}, "error": message, "traceback": trace}
