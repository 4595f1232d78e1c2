"""bench/gpu_kernel_probe.py's parts that need no GPU: the launches a variant's launcher makes,
recorded without running them (the streamk probe times each one alone)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.unit.bench_modules import load_bench

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def probe() -> Any:
    return load_bench("gpu_kernel_probe")


def test_a_launchers_kernel_launches_are_recorded_not_run(probe: Any, tmp_path: Path) -> None:
    from triton.runtime.jit import JITFunction

    from codevolve.evaluator_workers.gpu.kernel_loader import SourceModules

    sources = SourceModules(tmp_path, environ=dict(os.environ), suffix="")
    stream_k = probe.load_variant("persistent_stream_k", sources)
    m, n, k = 300, 256, 512
    x = torch.zeros(m, k, dtype=torch.bfloat16)
    w = torch.zeros(n, k, dtype=torch.bfloat16)
    y = torch.zeros(m, n, dtype=torch.bfloat16)
    workspace = torch.zeros(1 << 20)
    # 3 x 2 tiles of 128 x 128 over 4 "SMs": 4 whole tiles, then the last 2 tiles' 16 K steps
    # shared out 4 a program; the sum kernel covers those 2 tiles in 16-row chunks.
    parts = probe.kernel_launches(stream_k.launch_persistent_stream_k, x, w, y, workspace, 4,
                                  128, 128, 64, 4, 4, 8, 1)  # fmt: skip
    assert sorted(parts) == ["persistent_stream_k_fixup_kernel", "persistent_stream_k_kernel"]
    main = parts["persistent_stream_k_kernel"]
    assert main.args[4:10] == (m, n, k, 4, 4, 4)  # M, N, K, whole tiles, steps a program, programs
    assert parts["persistent_stream_k_fixup_kernel"].args[0] is workspace
    # The launcher's module holds its kernels again.
    assert isinstance(stream_k.launch_persistent_stream_k.__globals__["persistent_stream_k_kernel"],
                      JITFunction)  # fmt: skip
