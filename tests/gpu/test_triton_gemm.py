"""The trusted Triton GEMM on a real GPU: exactness, resource errors, timing, fault recycling.

Skipped without torch, Triton or a CUDA device (CI has none); run on a GPU machine with
``pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CONFIGS = [
    (16, 64, 128, 2, 4, 1),  # decode-style, mma.sync
    (128, 128, 64, 4, 3, 8),  # wgmma
    (64, 32, 32, 2, 5, 4),
    (256, 128, 64, 8, 3, 8),
    (32, 16, 16, 1, 1, 1),  # one stage, one warp
]
SHAPES = [(1, 1280, 8192), (100, 320, 384), (37, 320, 200)]  # ragged M, N; K % BK != 0


@pytest.mark.parametrize("shape", SHAPES)
def test_every_config_writes_every_element_exactly_on_small_integers(
    shape: tuple[int, int, int],
) -> None:
    from codevolve.problems.gemm_tiling_gpu.device.gemm_bench import _CheckInputs

    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    checks = _CheckInputs(shape, gen)
    for config in CONFIGS:
        assert checks.problem_of(config) == "", config


def test_the_check_catches_a_wrong_result() -> None:
    from codevolve.problems.gemm_tiling_gpu.device.gemm_bench import _CheckInputs

    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    checks = _CheckInputs((64, 256, 512), gen)
    name, x, w, ref, exact = checks.cases[2]
    checks.cases[2] = (name, x, w, ref + 1, exact)  # a reference the kernel cannot match
    assert "differ" in checks.problem_of((64, 64, 64, 4, 3, 8))


def test_a_config_beyond_shared_memory_is_a_compile_error_not_a_fault() -> None:
    from codevolve.problems.gemm_tiling_gpu.device.gemm_bench import GemmBench

    bench = GemmBench()
    timing = bench.measure([((64, 1024, 1024), (256, 256, 128, 8, 5, 8))], seed=0, samples=3)[0]
    assert timing.status == "compile_error", timing


def test_measure_times_candidate_and_cublas_and_caches_the_pair() -> None:
    from codevolve.problems.gemm_tiling_gpu.device.gemm_bench import GemmBench

    bench = GemmBench()
    pair = ((512, 4096, 4096), (128, 128, 64, 4, 3, 8))
    first = bench.measure([pair], seed=0, samples=5)[0]
    assert first.status == "ok", first
    assert 0 < first.p20_us <= first.t_us <= first.p80_us
    assert first.cublas_us > 0 and first.samples == 5
    assert bench.measure([pair], seed=1, samples=5)[0] is first
    assert bench.measure([pair], seed=1, samples=5, use_cache=False)[0] is not first


def test_a_device_fault_fails_its_job_and_the_next_runs_in_a_fresh_process() -> None:
    from codevolve.evaluator_workers.gpu.device_process import DeviceProcess
    from codevolve.evaluator_workers.gpu.pinning import visible_gpus

    gpu = visible_gpus()[0]
    from tests.gpu.fault_jobs import TARGETS

    with DeviceProcess(gpu, jobs=TARGETS) as device:
        assert device.run("info", None, timeout_s=120).value == 1024.0
        wild = device.run("wild", None, timeout_s=120)
        assert wild.fault, wild
        assert device.run("info", None, timeout_s=120).value == 1024.0
        assert device.restarts == 1


def test_the_gemm_device_jobs_run_in_a_pinned_process() -> None:
    from codevolve.evaluator_workers.gpu.pinning import open_devices, visible_gpus
    from codevolve.problems import registry

    gpu = visible_gpus()[0]
    (device,) = open_devices([gpu], registry.device_jobs().values())
    with device:
        info = device.run("info", {}, timeout_s=120)
        assert info.ok and info.value["index"] == int(gpu)
        payload = {"pairs": [[16, 4096, 4096, 16, 64, 128, 2, 4, 1]], "samples": 5}
        reply = device.run("gemm.measure", payload, timeout_s=300)
        assert reply.ok, reply.error
        assert reply.value["timings"][0]["status"] == "ok"
