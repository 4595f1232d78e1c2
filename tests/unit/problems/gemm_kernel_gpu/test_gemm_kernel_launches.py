"""What a gemm-kernel-gpu variant's launcher launches, recorded without running a kernel: the
launcher runs once with its module's Triton kernels swapped for recorders, so the grids'
arguments are the launcher's own (persistent_stream_k's share of the last wave, here)."""

from __future__ import annotations

import builtins
import os
from pathlib import Path
from typing import Any

import pytest

from codevolve.evaluator_workers.gpu.source_loader import SourceModules
from codevolve.problems.gemm_kernel_gpu.kernel_source import variant_source

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

PRELUDE = "import math\nimport torch\nimport triton\nimport triton.language as tl\n"


class _Recorder:
    """Stands in for a Triton kernel: ``kernel[grid](*args)`` records ``args`` under its name."""

    def __init__(self, name: str, launches: dict[str, tuple[Any, ...]]) -> None:
        self._name, self._launches = name, launches

    def __getitem__(self, grid: Any) -> Any:
        def record(*args: Any, **kwargs: Any) -> None:
            self._launches[self._name] = args

        return record


def recorded_launches(
    namespace: dict[str, Any], launcher: str, *args: Any
) -> dict[str, tuple[Any, ...]]:
    """The arguments of each kernel launch ``namespace[launcher](*args)`` makes, by kernel."""
    from triton.runtime.jit import JITFunction

    launches: dict[str, tuple[Any, ...]] = {}
    kernels = [name for name, value in namespace.items() if isinstance(value, JITFunction)]
    namespace.update({name: _Recorder(name, launches) for name in kernels})
    namespace[launcher](*args)
    return launches


def test_persistent_stream_k_shares_the_last_waves_k_steps_out(tmp_path: Path) -> None:
    modules = SourceModules(tmp_path, environ=dict(os.environ), suffix="")
    name = "persistent_stream_k"
    namespace = modules.run(PRELUDE + variant_source(name), name, builtins)
    assert isinstance(namespace, dict), namespace
    m, n, k = 300, 256, 512
    x = torch.zeros(m, k, dtype=torch.bfloat16)
    w = torch.zeros(n, k, dtype=torch.bfloat16)
    y = torch.zeros(m, n, dtype=torch.bfloat16)
    workspace = torch.zeros(1 << 20)
    # 3 x 2 tiles of 128 x 128 over 4 "SMs": 4 whole tiles, then the last 2 tiles' 16 K steps
    # shared out 4 a program; the fix-up kernel sums those 2 tiles from the workspace.
    launches = recorded_launches(namespace, f"launch_{name}", x, w, y, workspace, 4,
                                 128, 128, 64, 4, 4, 8, 1)  # fmt: skip
    assert sorted(launches) == ["persistent_stream_k_fixup_kernel", "persistent_stream_k_kernel"]
    # M, N, K, whole tiles, K steps a program, programs
    assert launches["persistent_stream_k_kernel"][4:10] == (m, n, k, 4, 4, 4)
    assert launches["persistent_stream_k_fixup_kernel"][0] is workspace
