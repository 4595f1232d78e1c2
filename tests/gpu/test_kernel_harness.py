"""The gemm-kernel-gpu harness on a real GPU: honest kernels pass, hostile ones are caught.

Each hostile kernel is one way a candidate could look faster or correct without being either:
a wrong result, a write outside the output, a read of scratch it never cleared, work left on
another stream or thread, a result cached across calls, a changed input, a kernel that never
ends. Skipped without torch, Triton or a CUDA device; run with ``pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

RAGGED = [(1, 1280, 8192), (37, 320, 200), (100, 384, 512)]  # ragged M and N; K % 64 != 0
SPLIT_K = (16, 64, 128, 4, 4, 4)
VARIANT_ARGS = {
    "split_k": SPLIT_K,
    "persistent": (64, 64, 64, 4, 3, 8),
    "tma": (64, 128, 64, 4, 3, 8),
    "tma_persistent": (128, 128, 64, 8, 3, 8, 1),
    "tail_split": (64, 128, 64, 4, 4, 8),
    "stream_k": (64, 128, 64, 4, 4, 8),
    "persistent_tail": (64, 128, 64, 4, 4, 8, 1),
    "persistent_stream_k": (64, 128, 64, 4, 4, 8, 1),
    "persistent_stream_k_fused": (64, 128, 64, 4, 4, 8, 1),
    "persistent_tail_shared": (64, 128, 64, 4, 4, 8, 1),
    "split_k_fused": (16, 64, 128, 4, 4, 4),
    "plain": (64, 64, 64, 4, 3, 8),
    "gemv": (2, 16, 256, 4, 3),
    "tma_wide": (64, 64, 64, 4, 3, 8, 32),
    "tma_persistent_wide": (64, 64, 64, 4, 3, 8, 1, 32),
    "tma_wide_split": (64, 64, 64, 4, 3, 8, 3, 32),
}


@pytest.fixture(scope="module")
def bench() -> Any:
    from codevolve.evaluator_workers.gpu.kernel_bench import KernelBench

    return KernelBench()


@pytest.fixture(scope="module")
def loader(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from codevolve.evaluator_workers.gpu.kernel_loader import KernelLoader

    return KernelLoader(tmp_path_factory.mktemp("kernels"), environ={})  # keep this process's


def _gen(seed: int = 0) -> Any:
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    return gen


def _program(variant: str | None = None) -> str:
    from codevolve.problems.gemm_kernel_gpu.kernel_source import (
        VARIANTS,
        add_rule,
        apply_hunks,
        initial_program,
    )

    source = initial_program()
    if variant is None:
        return source
    hunks = add_rule(source, "True", VARIANTS[variant], VARIANT_ARGS[variant])
    assert hunks is not None
    return apply_hunks(source, hunks)


def _edited(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, old
    return source.replace(old, new)


@pytest.mark.parametrize("variant", [None, *VARIANT_ARGS])
def test_the_initial_program_and_every_variant_pass_the_check(
    variant: str | None, bench: Any, loader: Any
) -> None:
    launch = loader.load(_program(variant))
    assert callable(launch), launch
    for shape in RAGGED:
        assert bench.check(launch, shape, _gen()) == "", (variant, shape)


def test_timing_reports_candidate_and_cublas_medians(bench: Any, loader: Any) -> None:
    timing = bench.time(loader.load(_program()), (512, 4096, 4096), _gen(), samples=5)
    assert timing.status == "ok", timing
    assert 0 < timing.p20_us <= timing.t_us <= timing.p80_us and timing.cublas_us > 0


def test_a_wrong_result_is_caught(bench: Any, loader: Any) -> None:
    scaled = "(acc * 1.01).to(tl.bfloat16), mask="  # one percent off: beyond bf16 tolerance
    source = _edited(_program(), "acc.to(tl.bfloat16), mask=", scaled)
    problem = bench.check(loader.load(source), (64, 256, 512), _gen())
    assert "wrong" in problem or "exact" in problem, problem


def test_a_write_outside_the_output_is_caught(bench: Any, loader: Any) -> None:
    source = _edited(_program(), "mask=(rows[:, None] < M) &", "mask=(rows[:, None] < M + 1) &")
    assert "outside the output" in bench.check(loader.load(source), (37, 320, 256), _gen())


def test_reading_scratch_it_never_cleared_is_caught(bench: Any, loader: Any) -> None:
    # Split-K that adds its partial to what the workspace held (zero, it assumes).
    source = _edited(
        _program("split_k"),
        "tl.store(part, acc, mask=",
        "tl.store(part, acc + tl.load(part, mask=(rows[:, None] < M)), mask=",
    )
    problem = bench.check(loader.load(source), (16, 1024, 2048), _gen())
    assert "wrong or unwritten" in problem, problem


def test_work_left_on_another_stream_is_caught(bench: Any) -> None:
    side = torch.cuda.Stream()

    def launch(x: Any, w: Any, y: Any, workspace: Any, num_sms: int) -> None:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # ~25 ms of spinning before the real work
            y.copy_(x @ w.t())

    problem = bench.check(launch, (64, 256, 512), _gen())
    assert "wrong or unwritten" in problem, problem


def test_work_left_on_another_thread_is_caught(bench: Any) -> None:
    def launch(x: Any, w: Any, y: Any, workspace: Any, num_sms: int) -> None:
        def later() -> None:
            time.sleep(0.2)
            y.copy_(x @ w.t())

        threading.Thread(target=later).start()

    problem = bench.check(launch, (64, 256, 512), _gen())
    assert "thread" in problem, problem
    time.sleep(0.3)  # let the thread finish before the next test


def test_results_cached_across_calls_fail_the_timed_rounds(bench: Any) -> None:
    cache: dict[int, Any] = {}
    calls = [0]

    def launch(x: Any, w: Any, y: Any, workspace: Any, num_sms: int) -> None:
        calls[0] += 1
        if calls[0] > 3 and y.data_ptr() in cache:  # honest for the three checks, then replays
            y.copy_(cache[y.data_ptr()])
            return
        y.copy_(x @ w.t())
        cache[y.data_ptr()] = y.clone()

    shape = (256, 1024, 1024)
    assert bench.check(launch, shape, _gen()) == ""
    timing = bench.time(launch, shape, _gen(1), samples=5)
    assert timing.status == "incorrect", timing


def test_host_time_before_a_launch_is_not_timed() -> None:
    from codevolve.evaluator_workers.gpu.kernel_bench import LEAD_CYCLES, KernelBench

    bench = KernelBench()  # its own: the lead it grows stays with it

    def launch(x: Any, w: Any, y: Any, workspace: Any, num_sms: int) -> None:
        time.sleep(0.0005)  # half a millisecond of host code: more than the first lead
        torch.matmul(x, w.t(), out=y)

    timing = bench.time(launch, (64, 1024, 1024), _gen(), samples=10)
    assert timing.status == "ok", timing
    assert bench.late_rounds > 0 and bench.lead_cycles > LEAD_CYCLES
    # The same cuBLAS call on both sides: the host's half millisecond is not in the medians.
    assert timing.t_us < 2 * timing.cublas_us, timing


def test_a_clean_flush_leaves_no_write_back_to_the_timed_launch() -> None:
    from codevolve.evaluator_workers.gpu.kernel_bench import KernelBench

    def launch(x: Any, w: Any, y: Any, workspace: Any, num_sms: int) -> None:
        torch.matmul(x, w.t(), out=y)

    # A decode GEMV reads 50 MB once: after a dirty flush it pays the L2's write-back too
    # (28.4 us against 22.2 on an H100, bench/gpu_kernel_probe.py).
    dims = (1, 6144, 4096)
    dirty = KernelBench("dirty").time(launch, dims, _gen(), samples=10)
    clean = KernelBench("clean").time(launch, dims, _gen(), samples=10)
    assert dirty.status == clean.status == "ok"
    assert clean.cublas_us < 0.95 * dirty.cublas_us, (clean, dirty)
    with pytest.raises(ValueError, match="unknown flush 'warm'"):
        KernelBench("warm")


def test_changing_the_inputs_is_caught(bench: Any) -> None:
    def launch(x: Any, w: Any, y: Any, workspace: Any, num_sms: int) -> None:
        y.copy_(x @ w.t())
        x.zero_()  # a later reference on the same inputs would agree with anything

    assert "changed its inputs" in bench.check(launch, (64, 256, 512), _gen())


def test_the_loader_refuses_torch_and_dunder_escapes(loader: Any) -> None:
    from codevolve.evaluator_workers.gpu.kernel_loader import LoadError

    refused = loader.load("import torch\n\ndef matmul(x, w, y, workspace, num_sms):\n    pass\n")
    assert isinstance(refused, LoadError) and "torch" in refused.message
    dunder = loader.load("def matmul(x, w, y, workspace, num_sms):\n    x.__class__\n")
    assert isinstance(dunder, LoadError) and "__class__" in dunder.message


HANG = """
import triton
import triton.language as tl


@triton.jit
def spin_kernel(ws_ptr):
    value = tl.atomic_add(ws_ptr, 0.0)
    while value != 1.5:  # the workspace holds NaN: never true
        value = tl.atomic_add(ws_ptr, 0.0)


def matmul(x, w, y, workspace, num_sms):
    spin_kernel[(1,)](workspace)
"""


def test_a_kernel_that_hangs_is_ended_and_the_device_keeps_serving() -> None:
    from codevolve.evaluator_workers.gpu.device_process import DeviceProcess
    from codevolve.evaluator_workers.gpu.pinning import visible_gpus

    payload = {"source": HANG, "shapes": [[16, 256, 256]], "seed": 0}
    with DeviceProcess(visible_gpus()[0]) as device:
        hang = device.run("kernel.measure", payload, timeout_s=60)
        assert hang.fault and "timed out" in hang.error, hang
        honest = {"source": _program(), "shapes": [[16, 256, 256]], "samples": 3}
        reply = device.run("kernel.measure", honest, timeout_s=120)
        assert reply.ok, reply.error
        assert reply.value["problems"] == [""]
        assert reply.value["timings"][0]["status"] == "ok"
        assert device.restarts == 1


class _Source:
    """A candidate as the GPU stages see it: they only read its source."""

    def __init__(self, source: str) -> None:
        self.source = source


def test_the_problem_stages_judge_a_program_on_the_device() -> None:
    import numpy as np

    from codevolve.evaluator_workers.gpu.device_process import DeviceProcess
    from codevolve.evaluator_workers.gpu.pinning import visible_gpus
    from codevolve.problems.gemm_kernel_gpu.stages import probe_stage

    rng = np.random.default_rng(0)
    with DeviceProcess(visible_gpus()[0]) as device:
        honest = probe_stage().run_on(_Source(_program("split_k")), device, rng)
        assert honest.passed, honest.error
        assert honest.score is not None and 0.2 < honest.score < 3.0
        assert len(honest.cases) == 6 and honest.artifacts["device_name"]
        wrong = _edited(
            _program(), "acc.to(tl.bfloat16), mask=", "(acc * 1.01).to(tl.bfloat16), mask="
        )
        failed = probe_stage().run_on(_Source(wrong), device, rng)
        assert not failed.passed and "wrong result" in (failed.error or ""), failed.error
        assert device.restarts == 0


def _cache_entries() -> set[str]:
    import os
    from pathlib import Path

    root = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    return {str(p) for p in root.rglob("*.cubin")} if root.exists() else set()


def test_kernels_compiled_ahead_in_helpers_are_only_loaded_here(
    bench: Any, loader: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from codevolve.evaluator_workers.gpu import kernel_compile
    from codevolve.evaluator_workers.gpu.kernel_loader import source_digest

    # Kernels no earlier run compiled: Triton keys its cache by the kernel's source text.
    source = _program("tail_split").replace(
        "    in_tail = pid >= full_tiles", f"    in_tail = pid >= full_tiles  # {time.time_ns()}"
    )
    assert source != _program("tail_split")
    shapes = [(37, 320, 200), (100, 384, 512)]
    compiler = kernel_compile.KernelCompiler(2)
    try:
        before = _cache_entries()
        assert compiler.compile_ahead(source, source_digest(source), shapes) == 2
        after = _cache_entries()
        assert after - before, "the helpers compiled nothing"
        assert compiler.compile_ahead(source, source_digest(source), shapes) == 0  # done already
        launch = loader.load(source)
        for shape in shapes:
            assert bench.check(launch, shape, _gen()) == ""
        assert _cache_entries() == after, "this process compiled what the helpers had compiled"
        # A host loop that never ends is cut at the timeout; the pool starts again after it.
        monkeypatch.setattr(kernel_compile, "COMPILE_TIMEOUT_S", 20.0)
        endless = source.replace(
            '    """y = x @ w.T: pick', '    while True:\n        pass\n    """y = '
        )
        assert endless != source
        assert compiler.compile_ahead(endless, source_digest(endless), shapes) == 0
        assert compiler.compile_ahead(source, source_digest(source), [(1, 1280, 8192)]) == 1
    finally:
        compiler.close()
