"""The gemm-kernel-gpu judge on a real GPU: honest kernels pass, hostile ones are caught.

Every candidate runs in a caged runner (kernel_role.py) on buffers in the judge's arena; the judge
(kernel_judge.py) checks and times it. Each hostile kernel is one way a candidate could look
faster or correct without being either: a wrong result, a write outside the output, a read of
scratch it never cleared, an answer before its work is done, a changed input, a kernel that
never ends; tests/gpu/test_kernel_boundary_gpu.py has the host-code attacks. Skipped without
torch, Triton or a CUDA device; run with ``pytest -m gpu tests/gpu``.
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
def runners() -> Iterator[Any]:
    from codevolve.evaluator_workers.gpu.runner_link import RunnerPool, RunnerSettings

    pool = RunnerPool(RunnerSettings(device="cuda"), warm=1)
    yield pool
    pool.close()


def measure(runners: Any, source: str, shapes: list[Any], **settings: Any) -> dict[str, Any]:
    from codevolve.problems.gemm_kernel_gpu.device.kernel_judge import MeasureSettings, measure

    fields = {"time": False, "samples": 5, **settings}
    fields["check_shapes"] = tuple(fields.get("check_shapes", ()))
    return measure(
        source, MeasureSettings(shapes=tuple(shapes), **fields), device="cuda", runners=runners
    )


def problem(reply: dict[str, Any]) -> str:
    assert not reply["load_error"], reply
    return str(reply["problems"][-1])


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
    variant: str | None, runners: Any
) -> None:
    reply = measure(runners, _program(variant), RAGGED)
    assert not reply["load_error"] and reply["problems"] == ["", "", ""], (variant, reply)


def test_timing_reports_candidate_and_cublas_medians_through_a_graph(runners: Any) -> None:
    reply = measure(runners, _program(), [(512, 4096, 4096), (1, 4096, 4096)], time=True)
    for row in reply["timings"]:
        assert row["status"] == "ok", row
        assert 0 < row["p20_us"] <= row["t_us"] <= row["p80_us"] and row["cublas_us"] > 0
        assert row["graph"] and row["batch"] > 1, row
    assert reply["isolation"]["seccomp"], reply["isolation"]


def test_a_wrong_result_is_caught(runners: Any) -> None:
    scaled = "(acc * 1.01).to(tl.bfloat16), mask="  # one percent off: beyond bf16 tolerance
    source = _edited(_program(), "acc.to(tl.bfloat16), mask=", scaled)
    found = problem(measure(runners, source, [(64, 256, 512)]))
    assert "wrong" in found or "exact" in found, found


def test_a_write_outside_the_output_is_caught(runners: Any) -> None:
    source = _edited(_program(), "mask=(rows[:, None] < M) &", "mask=(rows[:, None] < M + 1) &")
    assert "outside the output" in problem(measure(runners, source, [(37, 320, 256)]))


def test_reading_scratch_it_never_cleared_is_caught(runners: Any) -> None:
    # Split-K that adds its partial to what the workspace held (zero, it assumes).
    source = _edited(
        _program("split_k"),
        "tl.store(part, acc, mask=",
        "tl.store(part, acc + tl.load(part, mask=(rows[:, None] < M)), mask=",
    )
    found = problem(measure(runners, source, [(16, 1024, 2048)]))
    assert "wrong or unwritten" in found, found


def test_the_loader_refuses_torch_and_dunder_escapes(runners: Any) -> None:
    imports = "import torch\n\ndef matmul(x, w, y, workspace, num_sms):\n    pass\n"
    assert "torch" in measure(runners, imports, [(16, 64, 64)])["load_error"]
    dunder = "def matmul(x, w, y, workspace, num_sms):\n    x.__class__\n"
    assert "__class__" in measure(runners, dunder, [(16, 64, 64)])["load_error"]


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


def _device() -> Any:
    """A device process on the first visible GPU, serving the problems' device jobs."""
    from codevolve.evaluator_workers.gpu.pinning import open_devices, visible_gpus
    from codevolve.problems import registry

    (device,) = open_devices(visible_gpus()[:1], registry.device_jobs().values())
    return device


@pytest.mark.timeout(900)
def test_a_kernel_that_hangs_is_ended_and_the_device_keeps_serving() -> None:
    """Its kernels compiled ahead, a call may take COMPILED_REQUEST_TIMEOUT_S (60 s): then its
    runner (and with it its CUDA context) is ended, the program fails, and the device process
    serves the next judging without a restart (the judgings beside it in the pipeline live)."""
    payload = {"source": HANG, "shapes": [[16, 256, 256]], "seed": 0}
    with _device() as device:
        hang = device.run("kernel.measure", payload, timeout_s=600)
        assert hang.ok and not hang.fault, hang.error
        assert "did not answer in time" in hang.value["problems"][-1], hang.value
        honest = {"source": _program(), "shapes": [[16, 256, 256]], "samples": 3}
        reply = device.run("kernel.measure", honest, timeout_s=120)
        assert reply.ok, reply.error
        assert reply.value["problems"] == [""]
        assert reply.value["timings"][0]["status"] == "ok"
        assert device.restarts == 0


class _Source:
    """A candidate as the GPU stages see it: they only read its source."""

    def __init__(self, source: str) -> None:
        self.source = source


def test_the_problem_stages_judge_a_program_on_the_device() -> None:
    import numpy as np

    from codevolve.problems.gemm_kernel_gpu.stages import probe_stage

    rng = np.random.default_rng(0)
    with _device() as device:
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
