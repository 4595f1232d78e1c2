"""Loading a gemm-kernel-gpu candidate's kernel module: the filter a runner applies before it
runs one (kernel_role.py), on the pieces every role's loader shares (source_loader.py).

The module runs with source_loader's small table of builtins, and ``import`` reaches only
:data:`ALLOWED_IMPORTS` (Triton and ``math``; not torch, ``os``, ``threading``, ``ctypes``). The
problem's static check, on the CPU, comes first and is stricter; the cage is the wall.

Imported in runners and in the device process (the modules it loads import Triton).
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

from codevolve.evaluator_workers.gpu.source_loader import (
    SAFE_BUILTINS,
    LoadError,
    SourceModules,
    builtins_table,
    cached,
    dunder_problem,
    source_digest,
)

ENTRY_POINT = "matmul"
ALLOWED_IMPORTS = frozenset({"math", "triton", "triton.language", "triton.tools.tensor_descriptor"})

Launch = Callable[..., Any]  # matmul(x, w, y, workspace, num_sms)


def _guarded_import(
    name: str,
    globals_: Any = None,
    locals_: Any = None,
    fromlist: Any = (),
    level: int = 0,
) -> Any:
    if level != 0 or name not in ALLOWED_IMPORTS:
        raise ImportError(f"import of {name!r} is not allowed in a kernel program")
    return builtins.__import__(name, globals_, locals_, fromlist, level)


class KernelLoader:
    """Loads candidate sources as modules, once per SHA-256, and returns their entry point."""

    def __init__(
        self,
        directory: Path | None = None,
        *,
        environ: MutableMapping[str, str] = os.environ,
        rules: bool = True,
    ) -> None:
        """``environ``: the environment to cut down (this process's; tests pass their own);
        ``rules``: refuse dunder names before a source runs (off only in tests)."""
        self._modules = SourceModules(directory, environ=environ, suffix="-kernels")
        self._loaded: dict[str, Launch | LoadError] = {}
        self._rules = rules

    def load(self, source: str) -> Launch | LoadError:
        digest = source_digest(source)
        return cached(self._loaded, digest, lambda: self._load(source, digest))

    def _load(self, source: str, digest: str) -> Launch | LoadError:
        problem = dunder_problem(source) if self._rules else ""
        if problem:
            return LoadError(problem)
        table = builtins_table(SAFE_BUILTINS, _guarded_import)
        namespace = self._modules.run(source, f"candidate_{digest[:20]}", table)
        if isinstance(namespace, LoadError):
            return namespace
        entry: Launch | None = namespace.get(ENTRY_POINT)
        if not callable(entry):
            return LoadError(f"the program defines no function {ENTRY_POINT!r}")
        return entry
