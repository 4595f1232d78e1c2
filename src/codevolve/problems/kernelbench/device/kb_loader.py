"""Loading a KernelBench problem's two programs into the device process: the reference and the
candidate.

- The reference (``Model``, ``get_inputs``, ``get_init_inputs``) is the user's own trusted file:
  normal builtins, a module namespace of its own, checked only against accidents
  (:func:`~codevolve.core.kernel_rules.check_reference`), loaded once per SHA-256.
- The candidate (``ModelNew``) is not trusted. It is refused before it runs when it breaks
  :func:`~codevolve.core.kernel_rules.check_model_new`, then executed with a small table of
  builtins (:data:`CANDIDATE_BUILTINS`) and an ``import`` that reaches only
  :data:`~codevolve.core.kernel_rules.ALLOWED_IMPORTS`. It is executed afresh for every judging:
  whatever its module keeps (a dict of outputs at module level) ends with that judging.

Both are written first to a file named by their SHA-256: ``@triton.jit`` reads a kernel's source
through ``inspect``, which needs a file, and Triton's compiled kernels are then reused across
judgings of one source. The process's environment is cut down before the first program loads
(source_loader.scrub_environment): no worker secret is readable from here.

Imported only in the device process (the programs it loads import torch and Triton).
"""

from __future__ import annotations

import builtins
import dis
import os
import sys
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codevolve.core.kernel_rules import (
    ALLOWED_IMPORTS,
    CANDIDATE_CLASS,
    REFERENCE_CLASS,
    REFERENCE_FUNCTIONS,
    check_model_new,
    check_reference,
)
from codevolve.evaluator_workers.gpu.source_loader import (
    SAFE_BUILTINS,
    LoadError,
    SourceModules,
    builtins_table,
    cached,
    source_digest,
)

# What a candidate's module may call beyond source_loader's arithmetic and containers: what a
# class definition needs (``__build_class__``, ``super``, ``object``, the method decorators), a
# few iterators, ``str`` and ``print``, and the exceptions a kernel raises on bad input.
CANDIDATE_BUILTINS = (
    *SAFE_BUILTINS,
    "super", "__build_class__", "object", "property", "staticmethod", "classmethod", "slice",
    "map", "filter", "str", "print", "Exception", "RuntimeError", "NotImplementedError",
    "TypeError",
)  # fmt: skip

_IMPORT_NAME = dis.opmap["IMPORT_NAME"]

__all__ = ["CandidateProgram", "KbLoader", "LoadError", "ReferenceProgram"]


@dataclass(frozen=True, slots=True)
class ReferenceProgram:
    """The user's reference, loaded: its class and input functions, and its source's hash."""

    model: Callable[..., Any]  # the class Model
    get_inputs: Callable[[], Any]
    get_init_inputs: Callable[[], Any]
    digest: str  # SHA-256 of the source: compile timings are cached by it


@dataclass(frozen=True, slots=True)
class CandidateProgram:
    """A candidate, loaded: its class ModelNew."""

    model_new: Callable[..., Any]
    digest: str


def _guarded_import(
    name: str,
    globals_: Any = None,
    locals_: Any = None,
    fromlist: Any = (),
    level: int = 0,
) -> Any:
    """The candidate's ``__import__``: its own import statements reach only the allowed modules.

    C code that torch runs on the candidate's behalf also imports through the builtins of the
    Python frame that called it (``PyImport_Import``: a dispatch mode makes torch import
    ``torch._library`` in the middle of ``torch.cumsum``). Those calls come from a frame that is
    not executing an import statement, and get the real ``__import__``."""
    caller = sys._getframe(1)
    if caller.f_code.co_code[caller.f_lasti] != _IMPORT_NAME:
        return builtins.__import__(name, globals_, locals_, fromlist, level)
    if level != 0 or name not in ALLOWED_IMPORTS:
        raise ImportError(f"import of {name!r} is not allowed in a KernelBench program")
    if any(str(item).startswith("_") for item in fromlist or ()):
        raise ImportError(f"private names of {name!r} cannot be imported")
    return builtins.__import__(name, globals_, locals_, fromlist, level)


class KbLoader:
    """Loads references (cached by hash) and candidates (executed afresh) from source."""

    def __init__(
        self, directory: Path | None = None, *, environ: MutableMapping[str, str] = os.environ
    ) -> None:
        """``environ``: the environment to cut down (this process's; tests pass their own)."""
        self._modules = SourceModules(directory, environ=environ, suffix="-kb")
        self._references: dict[str, ReferenceProgram | LoadError] = {}

    def reference(self, source: str) -> ReferenceProgram | LoadError:
        digest = source_digest(source)
        return cached(self._references, digest, lambda: self._load_reference(source, digest))

    def candidate(self, source: str) -> CandidateProgram | LoadError:
        problem = check_model_new(source)
        if problem:
            return LoadError(problem)
        digest = source_digest(source)
        table = builtins_table(CANDIDATE_BUILTINS, _guarded_import)
        namespace = self._modules.run(source, f"kb_candidate_{digest[:20]}", table)
        if isinstance(namespace, LoadError):
            return namespace
        model_new = namespace.get(CANDIDATE_CLASS)
        if not isinstance(model_new, type):
            return LoadError(f"the program defines no class {CANDIDATE_CLASS}")
        return CandidateProgram(model_new=model_new, digest=digest)

    def _load_reference(self, source: str, digest: str) -> ReferenceProgram | LoadError:
        problem = check_reference(source)
        if problem:
            return LoadError(f"reference: {problem}")
        namespace = self._modules.run(source, f"kb_reference_{digest[:20]}", builtins)
        if isinstance(namespace, LoadError):
            return LoadError(f"reference: {namespace.message}")
        model, get_inputs, get_init_inputs = (
            namespace.get(name) for name in (REFERENCE_CLASS, *REFERENCE_FUNCTIONS)
        )
        if not (callable(model) and callable(get_inputs) and callable(get_init_inputs)):
            return LoadError("reference: Model, get_inputs or get_init_inputs is not callable")
        return ReferenceProgram(model, get_inputs, get_init_inputs, digest)
