"""Compiling ahead (evaluator_workers/gpu/kernel_compile.py), the parts that need no GPU: the key a
helper claims a kernel by, and the claim itself across processes. The helpers themselves run in
tests/gpu/test_kernel_harness.py."""

from __future__ import annotations

import importlib.util
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from codevolve.evaluator_workers.gpu.kernel_compile import claim, launch_key  # noqa: E402

KERNEL = """
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["M"])
def kernel(x_ptr, M, N, BLOCK: tl.constexpr):
    pass
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = tmp_path_factory.mktemp("kernels") / "claims_kernel.py"
    path.write_text(KERNEL)  # Triton reads a kernel's source from its file
    spec = importlib.util.spec_from_file_location("claims_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel


def _key(kernel: Any, *args: Any, **kwargs: Any) -> str | None:
    return launch_key(kernel, args, kwargs)


def test_launches_that_compile_one_kernel_share_a_key(kernel: Any) -> None:
    x = torch.empty(64, dtype=torch.bfloat16)
    first = _key(kernel, x, 1, 4096, BLOCK=64, num_warps=4)
    assert first is not None
    assert _key(kernel, x, 768, 4096, BLOCK=64, num_warps=4) == first  # M is not specialised
    assert _key(kernel, x, 3, 8192, BLOCK=64, num_warps=4) == first  # N: divisible by 16 both


def test_what_triton_specialises_on_changes_the_key(kernel: Any) -> None:
    x = torch.empty(64, dtype=torch.bfloat16)
    base = _key(kernel, x, 1, 4096, BLOCK=64, num_warps=4)
    others = [
        _key(kernel, x, 1, 4100, BLOCK=64, num_warps=4),  # N % 16 != 0
        _key(kernel, x, 1, 1, BLOCK=64, num_warps=4),  # N == 1
        _key(kernel, x, 1, 4096, BLOCK=128, num_warps=4),  # a constexpr
        _key(kernel, x, 1, 4096, BLOCK=64, num_warps=8),  # a launch option
        _key(kernel, x.float(), 1, 4096, BLOCK=64, num_warps=4),  # the pointer's dtype
        _key(kernel, x[1:], 1, 4096, BLOCK=64, num_warps=4),  # not 16-byte aligned
        _key(kernel, x, 1, 4096, 128, num_warps=4),  # a constexpr given by position
    ]
    assert None not in others
    assert len({base, *others}) == len(others) + 1


def test_an_unexpected_kernel_object_gets_no_key() -> None:
    assert launch_key(object(), (1,), {}) is None


def _claim(folder: str) -> bool:
    return claim(folder, "k" * 64)


def test_one_process_of_many_wins_a_claim(tmp_path: Path) -> None:
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        won = pool.map(_claim, [str(tmp_path)] * 8)
    assert sorted(won) == [False] * 7 + [True]
    assert not claim(str(tmp_path), "k" * 64)
    assert claim(str(tmp_path), "j" * 64)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs helpers that fail: no CUDA device")
def test_a_helpers_own_failure_is_not_the_candidates() -> None:
    from codevolve.evaluator_workers.gpu.kernel_compile import KernelCompiler
    from codevolve.problems.gemm_kernel_gpu.kernel_source import initial_program

    compiler = KernelCompiler(2)
    try:
        # Without CUDA the helpers cannot shape their buffers: compile_ahead reports nothing sent,
        # and raises nothing the device job would take for the candidate's fault.
        assert compiler.compile_ahead(initial_program(), "d" * 64, [(16, 64, 64)]) == 0
        assert compiler.compile_ahead(initial_program(), "d" * 64, [(16, 64, 64)]) == 0  # done
    finally:
        compiler.close()


def test_the_device_process_shutdown_stops_the_kernel_jobs_compile_helpers() -> None:
    # A device process that ran a kernel job ends through gemm_jobs.shutdown: the helpers
    # compile_ahead started (left running between jobs) must end with it and be waited for, or
    # their queues' semaphores are reported leaked when the run exits.
    from codevolve.evaluator_workers.gpu import gemm_jobs, kernel_jobs

    compiler = kernel_jobs._compiler()
    compiler._pool = multiprocessing.get_context("spawn").Pool(2)  # as compile_ahead starts it
    helpers = list(compiler._pool._pool)  # type: ignore[attr-defined]
    assert all(helper.is_alive() for helper in helpers)
    gemm_jobs.shutdown()
    assert compiler._pool is None
    assert not any(helper.is_alive() for helper in helpers)
