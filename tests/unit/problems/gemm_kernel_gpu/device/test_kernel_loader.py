"""The kernel loader of the GPU device process, on a CPU: what a candidate module may reach."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from codevolve.evaluator_workers.gpu.source_loader import LOADED_LIMIT, LoadError, cached
from codevolve.problems.gemm_kernel_gpu.device.kernel_loader import KernelLoader

ENTRY = "def matmul(x, w, y, workspace, num_sms):\n    return max(x, w) + len(range(y))\n"


@pytest.fixture
def loader(tmp_path: Path) -> KernelLoader:
    return KernelLoader(tmp_path, environ={})


def test_a_plain_module_loads_once_per_source_and_keeps_its_file(
    loader: KernelLoader, tmp_path: Path
) -> None:
    launch = loader.load(ENTRY)
    assert callable(launch) and launch(2, 3, 4, None, 132) == 7
    assert loader.load(ENTRY) is launch  # cached by the source's hash
    assert [p.read_text() for p in tmp_path.glob("candidate_*.py")] == [ENTRY]


def test_the_cache_loads_each_digest_once_and_drops_the_oldest_past_its_limit() -> None:
    cache: dict[str, int] = {}
    loads: list[str] = []

    def load(digest: str) -> int:
        loads.append(digest)
        return len(loads)

    for index in range(LOADED_LIMIT + 1):
        digest = f"d{index}"
        cached(cache, digest, functools.partial(load, digest))
    assert cached(cache, "d1", lambda: load("again")) == 2  # kept: loaded once
    assert len(cache) == LOADED_LIMIT and "d0" not in cache  # the oldest went first
    assert loads == [f"d{index}" for index in range(LOADED_LIMIT + 1)]


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("import os\n" + ENTRY, "import of 'os' is not allowed"),
        ("import torch\n" + ENTRY, "import of 'torch' is not allowed"),
        ("from . import x\n" + ENTRY, "not allowed"),
        ("handle = open('/etc/passwd')\n" + ENTRY, "NameError"),
        ("secret = getattr(len, 'x')\n" + ENTRY, "NameError"),
        ("def matmul(x, w, y, workspace, num_sms):\n    return x.__class__\n", "__class__"),
        ("def matmul(x, w, y, workspace, num_sms):\n    return x._data\n", "'_data'"),
        ("g = __builtins__\n" + ENTRY, "__builtins__"),
        ("x = 1\n", "defines no function 'matmul'"),
        ("def matmul(:\n", "syntax error"),
    ],
)
def test_what_a_candidate_module_cannot_do(loader: KernelLoader, source: str, reason: str) -> None:
    result = loader.load(source)
    assert isinstance(result, LoadError) and reason in result.message, result


def test_the_environment_keeps_only_what_cuda_and_triton_read(tmp_path: Path) -> None:
    environ = {
        "CUDA_VISIBLE_DEVICES": "3",
        "TRITON_CACHE_DIR": "/tmp/t",
        "CODEVOLVE_DEVICE_INDEX": "3",
        "PATH": "/usr/bin",
        "CODEVOLVE_DATABASE_URL": "postgresql://user:secret@db/prod",
        "REDIS_URL": "redis://:secret@queue",
        "OPENAI_API_KEY": "sk-secret",
    }
    KernelLoader(tmp_path, environ=environ)
    assert sorted(environ) == [
        "CODEVOLVE_DEVICE_INDEX",
        "CUDA_VISIBLE_DEVICES",
        "PATH",
        "TRITON_CACHE_DIR",
    ]


def test_without_the_source_rules_a_dunder_name_loads(tmp_path: Path) -> None:
    source = "def matmul(x, w, y, workspace, num_sms):\n    return x.__class__\n"
    launch = KernelLoader(tmp_path, environ={}, rules=False).load(source)
    assert callable(launch) and launch(1, 2, 3, None, 4) is int
