"""gemm-kernel-gpu's pipeline on a real GPU: the compile lane compiles, without the GPU, the very
kernels the timing runner then launches (it compiles none itself), and a compile runner cannot
reach the GPU. Skipped without torch, Triton or a CUDA device; run with
``pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SHAPES = ((16, 4096, 4096), (2048, 4096, 4096))
RAGGED = ((37, 384, 1056),)


@pytest.fixture(scope="module")
def pipeline() -> Iterator[Any]:
    from codevolve.evaluator_workers.gpu.runner_link import RunnerPool, RunnerSettings
    from codevolve.problems.gemm_kernel_gpu.device.kernel_pipeline import (
        Pipeline,
        PipelineSettings,
    )

    runners = RunnerPool(RunnerSettings(device="cuda"), warm=1)
    settings = PipelineSettings.from_environment({}, "cuda")
    pipeline = Pipeline(settings, device="cuda", runners=runners)
    yield pipeline
    pipeline.close()
    runners.close()


def _variant(name: str, condition: str, params: tuple[int, ...]) -> str:
    from codevolve.problems.gemm_kernel_gpu.kernel_source import (
        VARIANTS,
        add_rule,
        apply_hunks,
        initial_program,
    )

    source = initial_program()
    hunks = add_rule(source, condition, VARIANTS[name], params)
    assert hunks is not None
    return apply_hunks(source, hunks)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(None, id="initial"),
        pytest.param(("tma_persistent", "M >= 1024", (128, 128, 64, 8, 4, 8, 1)), id="tma"),
        pytest.param(("split_k", "M <= 16", (16, 64, 128, 4, 4, 4)), id="split_k"),
    ],
)
def test_the_timing_runner_launches_the_kernels_compiled_ahead_and_compiles_none(
    pipeline: Any, source: Any
) -> None:
    from codevolve.problems.gemm_kernel_gpu.device.kernel_judge import MeasureSettings
    from codevolve.problems.gemm_kernel_gpu.kernel_source import initial_program

    program = initial_program() if source is None else _variant(*source)
    settings = MeasureSettings(shapes=SHAPES, check_shapes=RAGGED, samples=3, warmup=1)
    reply = pipeline.measure(program, settings)
    assert not reply["load_error"] and all(p == "" for p in reply["problems"]), reply
    assert [row["status"] for row in reply["timings"]] == ["ok", "ok"], reply["timings"]
    assert reply["compile"]["complete"], reply["compile"]
    assert reply["compiled_ahead"] > 0 and reply["compiled_late"] == 0, reply


def test_a_compile_runner_cannot_reach_the_gpu() -> None:
    from codevolve.problems.gemm_kernel_gpu.device.kernel_compile import CompileLane, Target

    body = """
def _torch(t):
    return t.__class__.__torch_function__.__func__.__globals__["torch"]


def matmul(x, w, y, workspace, num_sms):
    torch = _torch(x)
    opened = []
    for path in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"):
        try:
            torch.sys.modules["os"].open(path, 2)
            opened.append(path)
        except OSError:
            pass
    raise ValueError(f"cuda={torch.cuda.is_available()} opened={opened}")
"""
    lane = CompileLane(width=1, target=Target("cuda", 90), num_sms=132, device="cuda", rules=False)
    try:
        compiled = lane.compile(body, [SHAPES[0]])
    finally:
        lane.close()
    assert "cuda=False opened=[]" in compiled.note, compiled
