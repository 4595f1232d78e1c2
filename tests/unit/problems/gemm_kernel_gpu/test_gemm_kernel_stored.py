"""The GPU stages with the launch store: a program whose every launch is stored is scored with no
measurement, a child is timed only on the shapes whose launch is new, and timings of another GPU
model, of another harness version, or of a program outside the readable form are never used."""

from __future__ import annotations

from typing import Any

import numpy as np

from codevolve.core.device import GPU, DeviceReply
from codevolve.core.launch_store import StoredTiming
from codevolve.core.problem import JSONValue
from codevolve.problems.gemm_kernel_gpu.kernel_source import (
    REGIME_TESTS,
    VARIANTS,
    add_rule,
    apply_hunks,
    initial_program,
)
from codevolve.problems.gemm_kernel_gpu.stages import RAGGED_SHAPES, probe_stage
from codevolve.problems.gemm_kernel_gpu.stored import device_key
from tests.unit.evaluator_workers.test_cascade_handoff import FakeCandidate

INITIAL = initial_program()
INFO = {"name": "NVIDIA H100 80GB HBM3", "torch": "2.9", "triton": "3.6", "cuda": "12.8"}


class StoreCandidate(FakeCandidate):
    def __init__(self, source: str, stored: tuple[StoredTiming, ...] = ()) -> None:
        super().__init__(source)
        self.stored_timings = stored


class MeasuringDevice:
    """Answers ``info`` and ``kernel.measure``: a time per shape that grows with M."""

    def __init__(self, info: dict[str, Any] | None = None, slower: float = 1.0) -> None:
        self.index = 0
        self.capability = GPU
        self.info = info or INFO
        self.slower = slower
        self.jobs: list[tuple[str, Any]] = []

    def run(self, job: str, payload: JSONValue, *, timeout_s: float) -> DeviceReply:
        self.jobs.append((job, payload))
        if job == "info":
            return DeviceReply(value=self.info)
        assert job == "kernel.measure" and isinstance(payload, dict)
        shapes = payload["shapes"]
        checks = payload["check_shapes"]
        rows = [
            {"status": "ok", "t_us": self.slower * (5.0 + m / 64), "cublas_us": 6.0, "samples": 10}
            for m, _, _ in shapes
        ]
        return DeviceReply(
            value={
                "device": self.info,
                "load_error": "",
                "problems": [""] * (len(checks) + len(shapes)),
                "timings": rows,
            }
        )

    def measured(self) -> list[Any]:
        return [payload for job, payload in self.jobs if job == "kernel.measure"]


def _judge(source: str, device: MeasuringDevice, stored: tuple[StoredTiming, ...] = ()) -> Any:
    candidate = StoreCandidate(source, stored)
    return probe_stage().run_on(candidate, device, np.random.default_rng(0))


def _split_k_child() -> str:
    hunks = add_rule(INITIAL, REGIME_TESTS["decode"], VARIANTS["split_k"], (16, 64, 128, 4, 4, 4))
    assert hunks is not None
    return apply_hunks(INITIAL, hunks)


def test_a_first_judging_times_everything_and_hands_back_keyed_timings() -> None:
    device = MeasuringDevice()
    result = _judge(INITIAL, device)
    assert result.passed
    (payload,) = device.measured()
    assert len(payload["shapes"]) == len(probe_stage().shapes)
    assert [job for job, _ in device.jobs] == ["kernel.measure"]  # nothing stored: no info
    timings = result.launch_timings
    assert len(timings) == len(RAGGED_SHAPES) + len(probe_stage().shapes)
    assert {(t.gpu, t.harness) for t in timings} == {device_key(INFO)}
    assert sum(1 for t in timings if not t.timed) == len(RAGGED_SHAPES)
    assert result.artifacts["from_store"] == f"0/{len(probe_stage().shapes)}"


def test_a_program_whose_every_launch_is_stored_is_scored_without_a_measurement() -> None:
    first = _judge(INITIAL, MeasuringDevice())
    device = MeasuringDevice(slower=3.0)  # were it timed again, its score would differ
    again = _judge(INITIAL, device, first.launch_timings)
    assert [job for job, _ in device.jobs] == ["info"]
    assert again.passed and again.score == first.score and again.cases == first.cases
    assert again.launch_timings == ()
    count = len(probe_stage().shapes)
    assert again.artifacts["from_store"] == f"{count}/{count}"


def test_a_child_is_timed_only_on_the_shapes_whose_launch_is_new() -> None:
    first = _judge(INITIAL, MeasuringDevice())
    device = MeasuringDevice(slower=2.0)
    child = _judge(_split_k_child(), device, first.launch_timings)
    (payload,) = device.measured()
    decode = [[s.m, s.n, s.k] for s in probe_stage().shapes if s.m <= 16]
    assert payload["shapes"] == decode and decode
    assert payload["check_shapes"] == [[m, n, k] for m, n, k in RAGGED_SHAPES if m <= 16]
    assert child.passed
    by_case = {c.key: c.cost for c in child.cases}
    for shape in probe_stage().shapes:
        expected = (2.0 if shape.m <= 16 else 1.0) * (5.0 + shape.m / 64)
        assert by_case["gpu " + shape.key] == expected
    assert {t.key.launch.split("(")[0] for t in child.launch_timings} == {"launch_split_k"}


def test_timings_of_another_gpu_or_harness_are_not_used() -> None:
    first = _judge(INITIAL, MeasuringDevice())
    for changed in ({**INFO, "name": "NVIDIA H200"}, {**INFO, "triton": "3.7"}):
        device = MeasuringDevice(info=changed)
        result = _judge(INITIAL, device, first.launch_timings)
        (payload,) = device.measured()
        assert len(payload["shapes"]) == len(probe_stage().shapes)
        assert payload["check_shapes"] == [list(s) for s in RAGGED_SHAPES]
        assert result.artifacts["from_store"].startswith("0/")


def test_a_program_outside_the_readable_form_is_measured_and_stores_nothing() -> None:
    first = _judge(INITIAL, MeasuringDevice())
    outside = INITIAL.replace("def matmul(", "LIMIT = []\n\n\ndef matmul(", 1)
    device = MeasuringDevice()
    result = _judge(outside, device, first.launch_timings)
    assert [job for job, _ in device.jobs] == ["kernel.measure"]
    assert result.passed and result.launch_timings == ()


class WrongDevice(MeasuringDevice):
    """Finds the first timed shape sent wrong."""

    problem = "normal: 3 elements wrong or unwritten"

    def run(self, job: str, payload: JSONValue, *, timeout_s: float) -> DeviceReply:
        reply = super().run(job, payload, timeout_s=timeout_s)
        if job != "kernel.measure":
            return reply
        assert isinstance(reply.value, dict) and isinstance(payload, dict)
        problems = [""] * len(payload["check_shapes"]) + [self.problem]
        return DeviceReply(value={**reply.value, "problems": problems, "timings": []})


def test_a_wrong_shape_among_those_sent_is_named_as_itself() -> None:
    first = _judge(INITIAL, MeasuringDevice())
    result = _judge(_split_k_child(), WrongDevice(), first.launch_timings)
    first_decode = next(s for s in probe_stage().shapes if s.m <= 16)
    assert not result.passed and result.launch_timings == ()
    assert result.error == f"{first_decode.key}: wrong result: {WrongDevice.problem}"
