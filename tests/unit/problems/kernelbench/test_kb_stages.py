"""The judge stage of KernelBench problems reads the trusted judge's reply (no device here)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from codevolve.core.device import DeviceReply
from codevolve.problems.kernelbench.results import KernelRow, fast_p, summary
from codevolve.problems.kernelbench.spec import JudgeSettings, KernelSpec
from codevolve.problems.kernelbench.stages import COMPILE_NOTE, JUDGE_JOB, JudgeStage

SPEC = KernelSpec(
    name="19_relu",
    reference="...",
    initial_program="...",
    settings=JudgeSettings(seeds=2, trials=5, forbid=("aten.relu",), baselines=("eager",)),
)


def _reply(**changes: Any) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "device": {"name": "NVIDIA H200"},
        "load_error": "",
        "problem": "",
        "verdicts": {"kernelbench": "", "signed": "", "wide": ""},
        "correct": True,
        "correct_kernelbench": True,
        "max_abs_error": 1e-6,
        "ops": ["aten.empty_like"],
        "timing": {"candidate_ms": 0.5, "eager_ms": 1.0, "compile_ms": 0.8, "rounds": 5},
    }
    reply.update(changes)
    return reply


class _Candidate:
    source = "import triton\n@triton.jit\ndef k(): pass\n"


class _Device:
    index = 3
    capability = "gpu"

    def __init__(self, reply: DeviceReply) -> None:
        self.reply = reply
        self.calls: list[tuple[str, Any, float]] = []

    def run(self, job: str, payload: Any, *, timeout_s: float) -> DeviceReply:
        self.calls.append((job, payload, timeout_s))
        return self.reply


def test_a_correct_faster_program_scores_its_speedup_over_eager() -> None:
    device = _Device(DeviceReply(value=_reply()))
    result = JudgeStage(SPEC).run_on(_Candidate(), device, np.random.default_rng(0))
    assert result.passed and result.score == 2.0
    assert result.metrics["speedup_compile"] == 0.8 / 0.5
    assert result.features["uses_triton"] == 1.0
    assert "2.00x" in result.feedback and "aten.empty_like" in result.feedback
    job, payload, timeout = device.calls[0]
    assert job == JUDGE_JOB and timeout == SPEC.settings.timeout_s
    assert payload["forbid"] == ["aten.relu"] and len(payload["seeds"]) == 2
    assert payload["distributions"] == ["kernelbench", "signed", "wide"]


def test_each_evaluation_draws_fresh_seeds() -> None:
    stage = JudgeStage(SPEC)
    rng = np.random.default_rng(0)
    first, second = stage.payload("x", rng)["seeds"], stage.payload("x", rng)["seeds"]
    assert first != second


def test_correct_only_on_kernelbench_inputs_fails_and_says_so() -> None:
    verdicts = {"kernelbench": "", "signed": "max abs error 2.0 > 1e-4", "wide": "skipped: nan"}
    reply = _reply(verdicts=verdicts, correct=False)
    result = JudgeStage(SPEC).judge(reply, device_index=0)
    assert not result.passed and result.score is None
    assert result.error is not None
    assert "KernelBench's own inputs only" in result.error and "signed" in result.error
    assert "wide" not in result.error  # a skipped verdict is not a fault
    assert result.metrics["correct_kernelbench"] == 1.0


def test_a_hostile_finding_or_a_device_fault_fails_the_program() -> None:
    result = JudgeStage(SPEC).judge(_reply(problem="wrote into input 0"), device_index=0)
    assert not result.passed and result.error == "wrote into input 0"
    fault = _Device(DeviceReply(error="device job kb.judge timed out after 600 s", fault=True))
    result = JudgeStage(SPEC).run_on(_Candidate(), fault, np.random.default_rng(0))
    assert not result.passed and result.error is not None and "device fault" in result.error


def test_the_compile_baselines_seconds_and_cache_are_metrics_of_their_own() -> None:
    timing = {
        "candidate_ms": 0.5,
        "eager_ms": 1.0,
        "compile_ms": 0.8,
        "compile_seconds": 41.5,
        "compile_cache": "hit",
    }
    result = JudgeStage(SPEC).judge(_reply(timing=timing), device_index=0)
    assert result.passed and result.score == 2.0  # the seconds never touch a per-call time
    assert result.metrics["compile_seconds"] == 41.5 and result.metrics["compile_cache_hit"] == 1.0
    assert result.metrics["compile_ms"] == 0.8 and COMPILE_NOTE not in result.artifacts
    stage = JudgeStage(SPEC)
    missed = stage.judge(_reply(timing={**timing, "compile_cache": "miss"}), device_index=0)
    assert missed.metrics["compile_cache_hit"] == 0.0
    unknown = stage.judge(_reply(timing={**timing, "compile_cache": ""}), device_index=0)
    assert "compile_cache_hit" not in unknown.metrics


def test_a_reference_that_does_not_compile_leaves_a_note_and_is_judged_against_eager() -> None:
    note = "compile baseline failed: compiling Model raised AssertionError: no"
    timing = {
        "candidate_ms": 0.5,
        "eager_ms": 1.0,
        "compile_ms": None,
        "compile_seconds": 2.0,
        "compile_error": note,
    }
    result = JudgeStage(SPEC).judge(_reply(timing=timing), device_index=0)
    assert result.passed and result.score == 2.0
    assert result.artifacts[COMPILE_NOTE] == note
    assert "compile_ms" not in result.metrics and "speedup_compile" not in result.metrics
    assert note in result.feedback


def test_a_correct_program_without_timing_is_not_scored() -> None:
    result = JudgeStage(SPEC).judge(_reply(timing={}), device_index=0)
    assert not result.passed


def _row(
    name: str, speedup: float | None, *, reference: bool = False, compile_failed: bool = False
) -> KernelRow:
    return KernelRow(
        problem=name,
        job_id="j",
        state="done",
        proposals=10,
        correct=speedup is not None,
        is_reference=reference,
        speedup_eager=speedup,
        speedup_compile=None if speedup is None or compile_failed else speedup / 2,
        best_ms=None,
        eager_ms=None,
        compile_ms=None,
        uses_triton=False,
        best_program_id=None,
        compile_seconds=None if speedup is None or compile_failed else 10.04,
        compile_failed=compile_failed,
        compile_note="compile baseline failed: ..." if compile_failed else "",
    )


def test_fast_p_counts_correct_solutions_faster_than_p_and_never_the_reference_itself() -> None:
    rows = [
        _row("a", 2.5),
        _row("b", 1.2),
        _row("c", 1.01, reference=True),  # the reference's own code: noise, not a speedup
        _row("d", None),
    ]
    assert fast_p(rows, 0) == 3 / 4
    assert fast_p(rows, 1) == 2 / 4
    assert fast_p(rows, 2) == 1 / 4
    assert fast_p(rows, 1, against="compile") == 1 / 4
    figures = summary(rows, unsolved=1)  # a file that could not be searched counts as a failure
    assert figures["problems"] == 5 and figures["fast_p_eager"]["1.0"] == 2 / 5
    assert figures["kept_reference"] == 1


def test_a_problem_whose_compile_failed_counts_as_not_faster_against_compile() -> None:
    rows = [_row("a", 3.0), _row("b", 5.0, compile_failed=True), _row("c", None)]
    assert fast_p(rows, 0, against="compile") == 2 / 3  # correct: it counts for fast_0
    assert fast_p(rows, 1, against="compile") == 1 / 3  # never faster than a missing baseline
    assert fast_p(rows, 2, against="eager") == 2 / 3  # against eager it is a problem like any
    only_failed = [_row("b", 5.0, compile_failed=True)]
    assert fast_p(only_failed, 1, against="compile") == 0.0  # asked for, so not "never timed"
    assert fast_p([_row("a", 3.0)], 1, against="compile") == 1.0
    figures = summary(rows)
    assert (figures["compile_failed"], figures["compile_cached"]) == (1, 0)
    assert figures["compile_seconds"] == 10.0  # rounded to a tenth
    never = [dataclasses.replace(_row("d", 2.0), speedup_compile=None, compile_seconds=None)]
    assert summary(never)["compile_seconds"] is None
    assert summary(never)["fast_p_compile"]["1.0"] is None  # compile never asked for
