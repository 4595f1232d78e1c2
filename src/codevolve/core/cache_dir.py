"""The worker's cache folder: what codevolve keeps on disk from one process to the next.

A problem's tables that take seconds to compute (the GEMM cost model's) and the compiled
``torch.compile`` baselines of trusted references (evaluator_workers/gpu/compile_cache.py) live
there. The folder is ``$CODEVOLVE_CACHE_DIR`` (``--cache-dir`` sets it for a command and
the processes it starts), else ``$XDG_CACHE_HOME/codevolve``, else ``~/.cache/codevolve``.
Candidates never write it: the CPU sandbox confines them to their scratch folders, and a GPU
runner reaches none of it but the folder its judge lends a trusted runner.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CACHE_ENV = "CODEVOLVE_CACHE_DIR"


def cache_home(environ: Mapping[str, str] | None = None) -> Path:
    """The cache folder ``environ`` (this process's environment by default) names."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or "~", ".cache")
    return Path(base).expanduser() / "codevolve"
