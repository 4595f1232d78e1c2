"""The device's pipeline on the CPU, through real caged runners: compile runners (no GPU, Triton
compiling for an sm_90 GPU) and timing runners (torch, or Triton's interpreter).

What it must hold: a compile that takes long does not hold the timing lane, a compile that never
ends fails its program alone, every reply is its own program's, a program that does not load
never reaches the timing lane, the ready judgings of a pass share it, and cuBLAS is timed once per
shape for the judgings of a window.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("torch")

from codevolve.evaluator_workers.gpu.device_process import device_lane
from codevolve.evaluator_workers.gpu.runner_link import RunnerPool, RunnerSettings
from codevolve.problems.gemm_kernel_gpu.device.kernel_compile import Target
from codevolve.problems.gemm_kernel_gpu.device.kernel_judge import MeasureSettings
from codevolve.problems.gemm_kernel_gpu.device.kernel_pipeline import (
    Pipeline,
    PipelineSettings,
)
from codevolve.problems.gemm_kernel_gpu.kernel_source import initial_program
from tests.kernel_judging import HONEST

SHAPE = (8, 32, 64)
COMPILE_TIMEOUT_S = 60.0
# A program whose host code spins while it is compiled (on meta tensors), and runs right.
SLOW_COMPILE = """
def matmul(x, w, y, workspace, num_sms):
    if x.device.type == "meta":
        total = 0
        for step in range(40000000):
            total += step
    y.copy_(x.float() @ w.float().t())
"""
NEVER_COMPILES = """
def matmul(x, w, y, workspace, num_sms):
    while x.device.type == "meta":
        pass
    y.copy_(x.float() @ w.float().t())
"""
WRONG = """
def matmul(x, w, y, workspace, num_sms):
    y.zero_()
"""
RAISES = """
def matmul(x, w, y, workspace, num_sms):
    raise ValueError("program three's own message")
"""
DOES_NOT_LOAD = "def matmul(x, w, y, workspace, num_sms)\n    pass\n"


@pytest.fixture
def runners() -> Iterator[RunnerPool]:
    pool = RunnerPool(RunnerSettings(device="cpu", rules=False), warm=1)
    yield pool
    pool.close()


def _pipeline(runners: RunnerPool, **fields: Any) -> Pipeline:
    settings = {
        "compile_workers": 2,
        "target": Target("cuda", 90),
        "lane_batch": 8,
        "reference_age_s": 300.0,
        "compile_timeout_s": COMPILE_TIMEOUT_S,
        **fields,
    }
    return Pipeline(PipelineSettings(**settings), device="cpu", runners=runners)


def _settings(shape: tuple[int, int, int] = SHAPE) -> MeasureSettings:
    return MeasureSettings(shapes=(shape,), samples=3, warmup=1)


class _Judged:
    """Programs measured from threads of their own (as the device process runs its jobs),
    each reply and when it came."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.replies: dict[str, dict[str, Any]] = {}
        self.done_at: dict[str, float] = {}
        self.alive = 0
        self._threads: list[threading.Thread] = []

    def start(self, name: str, source: str, shape: tuple[int, int, int] = SHAPE) -> None:
        def run() -> None:
            reply = self.pipeline.measure(source, _settings(shape), self._alive)
            self.replies[name], self.done_at[name] = reply, time.monotonic()

        thread = threading.Thread(target=run, name=name)
        thread.start()
        self._threads.append(thread)

    def _alive(self) -> None:
        self.alive += 1

    def wait(self) -> None:
        for thread in self._threads:
            thread.join(timeout=300)
        assert not any(thread.is_alive() for thread in self._threads)


def _right(reply: dict[str, Any]) -> bool:
    statuses = [row["status"] for row in reply["timings"]]
    return not reply["load_error"] and reply["problems"] == [""] and statuses == ["ok"]


def test_a_slow_compile_does_not_hold_the_timing_lane(runners: RunnerPool) -> None:
    pipeline = _pipeline(runners)
    try:
        judged = _Judged(pipeline)
        judged.start("slow", SLOW_COMPILE)
        time.sleep(0.2)
        judged.start("quick", HONEST, (6, 32, 64))
        judged.wait()
    finally:
        pipeline.close()
    slow, quick = judged.replies["slow"], judged.replies["quick"]
    assert _right(slow) and _right(quick)
    assert judged.done_at["quick"] < judged.done_at["slow"]
    assert quick["lane"]["pass"] < slow["lane"]["pass"]  # timed while the other compiled
    assert slow["compile"]["seconds"] > quick["compile"]["seconds"]
    assert judged.alive > 0  # the waiting judging was told the pipeline moved


def test_a_compile_that_never_ends_fails_that_program_alone(runners: RunnerPool) -> None:
    pipeline = _pipeline(runners, compile_timeout_s=10.0)
    try:
        assert pipeline.compile_lane.compile(HONEST, [SHAPE]).complete  # its runners started
        judged = _Judged(pipeline)
        judged.start("hangs", NEVER_COMPILES)
        time.sleep(0.2)
        judged.start("honest", HONEST)
        judged.wait()
    finally:
        pipeline.close()
    hangs = judged.replies["hangs"]
    assert "compiling its kernels took longer than 10 s" in hangs["load_error"]
    assert hangs["timings"] == [] and "lane" not in hangs  # it never reached the device
    assert _right(judged.replies["honest"])
    assert judged.done_at["honest"] < judged.done_at["hangs"] + 60
    assert pipeline.timed == 1


def test_each_reply_is_its_own_programs(runners: RunnerPool) -> None:
    pipeline = _pipeline(runners)
    programs = {"honest": HONEST, "wrong": WRONG, "raises": RAISES, "no load": DOES_NOT_LOAD}
    try:
        judged = _Judged(pipeline)
        for name, source in programs.items():
            judged.start(name, source)
        judged.wait()
    finally:
        pipeline.close()
    replies = judged.replies
    assert _right(replies["honest"])
    assert "wrong or unwritten" in replies["wrong"]["problems"][-1]
    assert "program three's own message" in replies["raises"]["problems"][-1]
    assert "syntax" in replies["no load"]["load_error"].lower()
    assert "lane" not in replies["no load"] and pipeline.timed == 3


def test_the_judgings_ready_together_share_one_pass_and_cublas_per_shape(
    runners: RunnerPool,
) -> None:
    pipeline = _pipeline(runners)
    try:
        judged = _Judged(pipeline)
        with device_lane():  # the device is busy: the three become ready meanwhile
            for name in ("a", "b", "c"):
                judged.start(name, HONEST)
            deadline = time.monotonic() + 60
            while pipeline.ready < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        judged.wait()
        later = pipeline.measure(HONEST, _settings())
    finally:
        pipeline.close()
    lanes = [judged.replies[name]["lane"] for name in ("a", "b", "c")]
    assert all(_right(judged.replies[name]) for name in ("a", "b", "c"))
    assert [lane["judgings"] for lane in lanes] == [3, 3, 3]
    assert len({lane["pass"] for lane in lanes}) == 1
    assert _right(later) and later["lane"]["judgings"] == 1
    # cuBLAS timed once for the shape, and kept for the later judging
    assert pipeline.references.timed == 1
    first = judged.replies["a"]["timings"][0]["cublas_us"]
    assert all(r["timings"][0]["cublas_us"] == first for r in (*judged.replies.values(), later))


def test_without_keeping_cublas_each_judging_times_it(runners: RunnerPool) -> None:
    pipeline = _pipeline(runners, reference_age_s=0.0, compile_workers=0)
    try:
        for _ in range(2):
            assert _right(pipeline.measure(HONEST, _settings()))
    finally:
        pipeline.close()
    assert pipeline.references.timed == 2 and not pipeline.compile_lane.enabled


@pytest.mark.slow
def test_a_triton_program_is_compiled_for_the_gpu_ahead_and_its_runner_starts_with_it(
    runners: RunnerPool,
) -> None:
    pipeline = _pipeline(runners, compile_timeout_s=240.0)
    try:
        reply = pipeline.measure(initial_program(), _settings((16, 64, 64)))
    finally:
        pipeline.close()
    # (how Triton's interpreter runs it on the CPU is not what this test is about)
    assert not reply["load_error"] and reply["lane"]["judgings"] == 1, reply
    assert reply["compile"]["complete"] and reply["compiled_ahead"] > 0, reply["compile"]
