"""gemm-kernel-gpu on a CPU: the static check, the kernel mutations, the GPU stages' verdicts
with a fake device, and the problem's registration."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from codevolve.core.device import GPU, DeviceReply, capability_of
from codevolve.core.problem import JSONValue, SourceCheckStage
from codevolve.core.program import CaseResult
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.problems.gemm_kernel_gpu.dispatch_rules import MAX_PROGRAM_CHARS, rules_of
from codevolve.problems.gemm_kernel_gpu.kernel_source import (
    REGIME_TESTS,
    VARIANTS,
    add_rule,
    apply_hunks,
    initial_program,
)
from codevolve.problems.gemm_kernel_gpu.problem import gemm_kernel_gpu_problem
from codevolve.problems.gemm_kernel_gpu.stages import (
    RAGGED_SHAPES,
    full_stage,
    probe_stage,
)
from codevolve.problems.gemm_kernel_gpu.static_check import check_source
from codevolve.problems.gemm_tiling.shapes import (
    heldout_shapes,
    tiling_split,
    train_shapes,
    unseen_shapes,
    validation_shapes,
)
from codevolve.problems.registry import get_problem
from codevolve.prompt_sampler.search_replace import apply_answer
from tests.unit.evaluator_workers.test_cascade_handoff import FakeCandidate

INITIAL = initial_program()
DISPATCH = "    return launch_tiled(x, w, y, choose_config(M, N, K))"


def _host(line: str) -> str:
    """The initial program with ``line`` run in matmul before its launch."""
    assert INITIAL.count(DISPATCH) == 1
    return INITIAL.replace(DISPATCH, f"    {line}\n{DISPATCH}")


def test_the_initial_program_and_every_variant_pass_the_static_check() -> None:
    assert check_source(INITIAL) == ""
    source = INITIAL
    for variant in VARIANTS.values():
        args = tuple(values[0] for values in variant.values)
        hunks = add_rule(source, REGIME_TESTS["prefill"], variant, args)
        assert hunks is not None, variant
        source = apply_hunks(source, hunks)
        assert check_source(source) == "", variant
    assert [r.variant.name for r in rules_of(_tree(source))] == list(reversed(VARIANTS))


def _tree(source: str) -> Any:
    import ast

    return ast.parse(source)


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (INITIAL.replace("import triton\n", "import torch\nimport triton\n", 1), "'torch'"),
        (INITIAL.replace("import triton\n", "import threading\nimport triton\n", 1), "threading"),
        (_host("y.copy_(x @ w.T)"), "copy_"),
        (_host("z = x @ w.T"), "@ operator"),
        (_host("s = x.device"), "'device' in host code"),
        (_host("n = w.__class__"), "__class__"),
        (_host("n = triton.runtime"), "runtime"),
        (_host("n = getattr(x, 'shape')"), "getattr"),
        (_host("global CACHE"), "global"),
        (INITIAL + "\nprint('at import')\n", "module level"),
        (INITIAL.replace("def matmul(x, w, y, workspace, num_sms):", "def matmul(x, w, y):"), "("),
        (INITIAL.replace("# EVOLVE-BLOCK-END", ""), "EVOLVE"),
    ],
)
def test_the_static_check_refuses_what_it_can_see(source: str, reason: str) -> None:
    problem = check_source(source)
    assert reason in problem, problem
    result = SourceCheckStage(check_source).run(FakeCandidate(source), np.random.default_rng(0))
    assert not result.passed and result.error == problem


def test_inline_assembly_is_refused_even_inside_a_kernel() -> None:
    source = INITIAL.replace(
        "    pid = tl.program_id(0)\n",
        '    pid = tl.program_id(0)\n    t = tl.inline_asm_elementwise("", "=r", [], tl.int32)\n',
        1,
    )
    assert "inline_asm_elementwise" in check_source(source)


def _prompt(source: str, cases: tuple[CaseResult, ...] = ()) -> Prompt:
    return Prompt(
        job_id="job",
        problem="gemm-kernel-gpu",
        proposal_index=0,
        island=0,
        parent=ProgramView(id="parent", source=source, score=0.8, cases=cases),
        inspirations=(),
        best_cases={},
        context="",
        text="",
    )


CASES = tuple(CaseResult(key=f"gpu {s.key}", cost=10.0 + i) for i, s in enumerate(train_shapes()))


def test_every_mutation_kind_makes_children_that_apply_and_pass_the_static_check() -> None:
    mutations = {m.kind: m for m in gemm_kernel_gpu_problem().mutations()}
    parent = INITIAL
    made: dict[str, int] = {}
    order = ["add_variant", "tune_rule", "rule_bound", "field", "threshold", "add_rule"]
    order += ["delete_rule", "add_variant", "drop_rule"]
    for seed in range(4 * len(order)):
        rng = np.random.default_rng(seed)
        kind = order[seed % len(order)]
        answer = mutations[kind].propose(_prompt(parent, CASES), rng)
        if answer is None:
            continue
        applied = apply_answer(parent, answer)
        assert hasattr(applied, "source"), (kind, applied)
        assert check_source(applied.source) == "", (kind, answer)
        made[kind] = made.get(kind, 0) + 1
        parent = applied.source  # the next mutation edits this child
    kernel_kinds = {"add_variant", "tune_rule", "rule_bound", "drop_rule"}
    assert kernel_kinds <= set(made), made
    assert {"field", "threshold", "add_rule"} <= set(made), made


def test_add_variant_inserts_the_kernels_once_and_tune_rule_moves_one_parameter() -> None:
    mutations = {m.kind: m for m in gemm_kernel_gpu_problem().mutations()}
    source = INITIAL
    added = 0
    for seed in range(60):  # more than fit: proposals stop once no rule fits any longer
        answer = mutations["add_variant"].propose(_prompt(source), np.random.default_rng(seed))
        if answer is None:
            break
        source = apply_answer(source, answer).source  # type: ignore[union-attr]
        added += 1
    assert added >= 15 and len(source) <= MAX_PROGRAM_CHARS
    for variant in VARIANTS.values():
        assert source.count(f"def {variant.launcher}(") <= 1
    before = rules_of(_tree(source))
    answer = mutations["tune_rule"].propose(_prompt(source), np.random.default_rng(1))
    assert answer is not None
    after = rules_of(_tree(apply_answer(source, answer).source))  # type: ignore[union-attr]
    changed = [
        sum(a != b for a, b in zip(x.args, y.args, strict=True))
        for x, y in zip(before, after, strict=True)
    ]
    assert sorted(changed)[-1] == 1 and sum(changed) == 1


class FakeDevice:
    def __init__(self, reply: DeviceReply) -> None:
        self.index = 3
        self.capability = GPU
        self.reply = reply
        self.payloads: list[Any] = []

    def run(self, job: str, payload: JSONValue, *, timeout_s: float) -> DeviceReply:
        assert job == "kernel.measure"
        self.payloads.append(payload)
        return self.reply


def _timings(ratios: list[float]) -> list[dict[str, Any]]:
    return [
        {"status": "ok", "t_us": 10.0 / r, "cublas_us": 10.0, "detail": "", "samples": 10}
        for r in ratios
    ]


class ConfirmingCandidate(FakeCandidate):
    """A candidate of a re-measure's first sample (the cascade's SandboxedCandidate carries
    ``Task.remeasure``)."""

    remeasure = 1


def test_the_gpu_stage_scores_selection_shapes_and_times_no_test_shape_in_the_search() -> None:
    stage = full_stage()
    scored = len(stage.shapes)
    assert scored == 69 and set(stage.shapes) <= set(tiling_split().train + validation_shapes())
    value = {"device": {"name": "H200"}, "load_error": "", "problems": []}
    value["timings"] = _timings([0.8] * scored)
    device = FakeDevice(DeviceReply(value=value))
    result = stage.run_on(FakeCandidate(INITIAL), device, np.random.default_rng(0))
    assert result.passed and result.score == pytest.approx(0.8) and result.heldout == {}
    assert len(device.payloads[0]["shapes"]) == scored
    test = {(s.m, s.n, s.k) for s in heldout_shapes()}
    assert test.isdisjoint(tuple(s) for s in device.payloads[0]["shapes"])
    assert test.isdisjoint(stage.judged_shapes())  # what the launch store is asked for


def test_a_confirming_sample_times_the_test_shapes_too_and_reports_them_held_out() -> None:
    stage = full_stage()
    scored, held = len(stage.shapes), len(heldout_shapes())
    assert (held, stage.unseen) == (187 + 209, 209)
    # The held-out families' projections come first among the held-out shapes, and no (N, K)
    # of theirs is timed for the score.
    unseen = {(s.n, s.k) for s in stage.heldout[: stage.unseen]}
    assert unseen == {(s.n, s.k) for s in unseen_shapes()}
    assert unseen.isdisjoint((s.n, s.k) for s in stage.shapes)
    value = {"device": {"name": "H200"}, "load_error": "", "problems": []}
    value["timings"] = _timings([0.8] * scored + [0.5] * stage.unseen + [0.6] * (held - 209))
    device = FakeDevice(DeviceReply(value=value))
    result = stage.run_on(ConfirmingCandidate(INITIAL), device, np.random.default_rng(0))
    assert result.passed and result.score == pytest.approx(0.8)
    assert result.heldout["score"] == pytest.approx(0.5)
    assert result.heldout["unseen_vs_cublas"] == pytest.approx(0.5)
    assert result.heldout["seen_vs_cublas"] == pytest.approx(0.6)
    assert result.heldout["test_worst_vs_cublas"] == pytest.approx(0.5)
    assert result.metrics["train_score"] == pytest.approx(0.8)
    assert len(result.cases) == scored and all(c.key.startswith("gpu M=") for c in result.cases)
    assert set(result.features) == {"decode_vs_cublas", "prefill_vs_cublas", "mid_vs_cublas"}
    payload = device.payloads[0]
    assert payload["source"] == INITIAL and len(payload["shapes"]) == scored + held
    assert capability_of(stage) == GPU


def test_the_probe_checks_ragged_shapes_and_keeps_ninety_percent_of_the_parent() -> None:
    stage = probe_stage()
    assert stage.check_shapes == RAGGED_SHAPES
    assert stage.threshold is not None and not stage.threshold.passes(0.85, 1.0)
    value = {"load_error": "", "problems": ["", "normal: 3 elements wrong or unwritten"]}
    device = FakeDevice(DeviceReply(value=value))
    result = stage.run_on(FakeCandidate(INITIAL), device, np.random.default_rng(0))
    assert not result.passed
    assert result.error == (
        "ragged shape (37, 384, 1056): wrong result: normal: 3 elements wrong or unwritten"
    )


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (DeviceReply(value={"load_error": "import of 'os' is not allowed"}), "did not load"),
        (DeviceReply(error="device job kernel.measure timed out after 900 s", fault=True), "fault"),
    ],
)
def test_load_errors_and_device_faults_fail_the_program(reply: DeviceReply, error: str) -> None:
    result = full_stage().run_on(
        FakeCandidate(INITIAL), FakeDevice(reply), np.random.default_rng(0)
    )
    assert not result.passed and result.error is not None and error in result.error


def test_a_wrong_timed_output_on_a_held_out_shape_fails_without_naming_it() -> None:
    stage = full_stage()
    rows = _timings([1.0] * (len(stage.shapes) + len(stage.heldout)))
    rows[-1] = {"status": "incorrect", "detail": "5 checked elements of timed outputs wrong"}
    value = {"load_error": "", "problems": [], "timings": rows}
    result = stage.run_on(
        ConfirmingCandidate(INITIAL),
        FakeDevice(DeviceReply(value=value)),
        np.random.default_rng(0),
    )
    assert not result.passed and result.error is not None
    assert result.error.startswith("a held-out shape: incorrect")


def test_the_problem_is_registered_with_a_cpu_stage_then_two_gpu_stages() -> None:
    problem = get_problem("gemm-kernel-gpu")
    assert [s.name for s in problem.stages] == ["static", "gpu_probe", "gpu"]
    assert [capability_of(s) for s in problem.stages] == ["cpu", GPU, GPU]
    assert problem.initial_program == INITIAL
    cpu_only = problem.stages[1].run(FakeCandidate(INITIAL), np.random.default_rng(0))
    assert not cpu_only.passed and "needs a worker with a GPU" in (cpu_only.error or "")
