"""gemm-tiling-gpu: its cascade (cost model first, then the GPU), the GPU stage's verdicts with a
fake device, and the oracle's candidate set."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from codevolve.core.device import CPU, GPU, DeviceReply, capability_of
from codevolve.core.problem import JSONValue
from codevolve.core.program import CaseResult
from codevolve.core.prompt import BestCase, ProgramView, Prompt
from codevolve.problems.gemm_tiling.catalogue import MEASURED
from codevolve.problems.gemm_tiling.errors import GemmTilingError
from codevolve.problems.gemm_tiling.problem import describe
from codevolve.problems.gemm_tiling.shapes import M_VALUES, all_shapes, grid_of
from codevolve.problems.gemm_tiling.space import GemmConfig
from codevolve.problems.gemm_tiling_gpu.oracle import (
    candidate_configs,
    inductor_configs,
    load_oracle,
    model_top_configs,
    neighbours,
    parse_oracle,
    tutorial_configs,
)
from codevolve.problems.gemm_tiling_gpu.problem import (
    PROMOTION,
    gemm_tiling_gpu_problem,
    measured_view,
)
from codevolve.problems.gemm_tiling_gpu.split import gpu_split
from codevolve.problems.gemm_tiling_gpu.stages import GpuTrainStage
from codevolve.problems.registry import get_problem
from tests.unit.evaluator_workers.gpu import fake_device_jobs
from tests.unit.evaluator_workers.test_cascade_handoff import FakeCandidate

EXPERT_SOURCE = gemm_tiling_gpu_problem().initial_program


class FakeDevice:
    """A device answering gemm.measure with the fake backend's formula, or a set reply."""

    def __init__(self, reply: DeviceReply | None = None, status: str = "ok") -> None:
        self.index = 5
        self.capability = GPU
        self.payloads: list[Any] = []
        self._reply = reply
        self._status = status

    def run(self, job: str, payload: JSONValue, *, timeout_s: float) -> DeviceReply:
        self.payloads.append(payload)
        if self._reply is not None:
            return self._reply
        value = fake_device_jobs.JOBS[job](payload)
        for timing in value["timings"][:1]:
            timing["status"], timing["detail"] = self._status, "1 element unwritten"
        return DeviceReply(value=value)


def test_the_cascade_runs_the_cost_model_on_cpu_then_promotes_to_the_gpu() -> None:
    problem = get_problem("gemm-tiling-gpu")
    stages = problem.stages
    assert [s.name for s in stages] == ["static", "probe", "train", "gpu"]
    assert [capability_of(s) for s in stages] == [CPU, CPU, CPU, GPU]
    assert stages[2].threshold == PROMOTION
    assert problem.description.startswith(describe(gpu_split()))
    # The task names the six seen projections and never a held-out one.
    assert "8B.qkv: N=6144, K=4096" in problem.description
    assert not [s for s in gpu_split().unseen_test if s.projection in problem.description]


def test_the_gpu_stage_scores_measured_speedup_over_the_expert_and_records_the_device() -> None:
    device = FakeDevice()
    result = GpuTrainStage().run_on(FakeCandidate(EXPERT_SOURCE), device, np.random.default_rng(0))
    assert result.passed and result.score is not None
    assert abs(result.score - 1.0) < 1e-12  # the expert against itself
    rows = device.payloads[0]["pairs"]
    split = gpu_split()
    assert len(rows) == 2 * len(split.train + split.validation + split.unseen_test)
    assert result.artifacts["device_index"] == "5"
    assert {"gpu_speedup", "gpu_vs_cublas", "gpu_speedup_decode"} <= set(result.metrics)
    assert {"train_score", "gpu_speedup_validation"} <= set(result.metrics)
    assert "score" in result.heldout  # the held-out split is measured, reported, not scored
    assert all(case.key.startswith("gpu M=") for case in result.cases)
    scored = {case.key.removeprefix("gpu ") for case in result.cases}
    assert scored == {s.key for s in split.train + split.validation}
    assert scored.isdisjoint(s.key for s in split.unseen_test)


def test_the_cost_model_stage_reports_the_held_out_projections_and_no_seen_test() -> None:
    train = (
        get_problem("gemm-tiling-gpu")
        .stages[2]
        .run(FakeCandidate(EXPERT_SOURCE), np.random.default_rng(0))
    )
    assert train.passed, train.error
    assert train.heldout["score"] == pytest.approx(1.0)  # the expert against itself
    assert set(train.heldout) == {"score", "unseen_speedup", "unseen_over_oracle"}
    assert len(train.cases) == 66 + 72


def test_the_split_holds_out_two_whole_measured_projections() -> None:
    split = gpu_split()
    held_out = {s.projection for s in split.unseen_test}
    assert held_out == {"8B.gate_up", "70B_tp8.gate_up"}  # one per model, drawn with SPLIT_SEED
    unseen = {(s.n, s.k) for s in split.unseen_test}
    assert unseen.isdisjoint((s.n, s.k) for s in split.train + split.validation)
    assert len(split.train) == 6 * 11 and len(split.validation) == 6 * 12
    assert not split.seen_test
    assert {(p.n, p.k) for p in MEASURED} == set(split.seen_pairs) | unseen


# Answers like the expert on every shape but 70B_tp8.o with 32 < M <= 64, where it returns a
# tiny tile: no train shape reaches that rule (train has M = 32 and 64 only), the validation
# shape 70B_tp8.o M=48 does.
UNREACHED_RULE = EXPERT_SOURCE.replace(
    "    if M <= 32:",
    "    if N == 8192 and K == 1024 and 32 < M < 64:\n"
    "        return GemmConfig(16, 16, 128, 1, 5, 4)\n"
    "    if M <= 32:",
)


def test_a_rule_no_train_shape_reaches_is_still_timed_and_scored_by_the_gpu_stage() -> None:
    split = gpu_split()
    reached = [s for s in split.train if s.n == 8192 and s.k == 1024 and 32 < s.m < 64]
    assert reached == []  # the premise: the train split leaves this rule unjudged
    ms = [s.m for s in split.validation if s.n == 8192 and s.k == 1024 and 32 < s.m < 64]
    assert ms == [48]
    rng = np.random.default_rng(0)
    result = GpuTrainStage().run_on(FakeCandidate(UNREACHED_RULE), FakeDevice(), rng)
    assert result.passed and result.score is not None
    assert result.metrics["train_score"] == pytest.approx(1.0)
    assert result.metrics["gpu_speedup_validation"] < 0.99
    assert result.score < 1.0
    slow = next(c for c in result.cases if c.key == "gpu M=48 N=8192 K=1024")
    assert slow.detail == str(GemmConfig(16, 16, 128, 1, 5, 4))


def test_a_wrong_kernel_result_or_a_device_fault_fails_the_program() -> None:
    rng = np.random.default_rng(0)
    wrong = GpuTrainStage().run_on(
        FakeCandidate(EXPERT_SOURCE), FakeDevice(status="incorrect"), rng
    )
    assert not wrong.passed and "incorrect" in (wrong.error or "")
    fault = DeviceReply(error="CUDA error: an illegal memory access", fault=True)
    faulted = GpuTrainStage().run_on(FakeCandidate(EXPERT_SOURCE), FakeDevice(fault), rng)
    assert not faulted.passed and (faulted.error or "").startswith("device fault")


def test_the_gpu_stage_without_a_device_fails_instead_of_guessing() -> None:
    result = GpuTrainStage().run(FakeCandidate(EXPERT_SOURCE), np.random.default_rng(0))
    assert not result.passed and "capability 'gpu'" in (result.error or "")


def test_the_oracle_candidates_hold_the_model_best_the_published_lists_and_the_expert() -> None:
    assert len(tutorial_configs()) == 11  # 5 of the 16 exceed shared memory in bf16
    decode = next(s for s in all_shapes() if s.m == 1)
    assert all(c.block_m == 16 for c in inductor_configs(decode))  # scaled to M = 1
    candidates = candidate_configs(decode)
    assert model_top_configs(decode, 1)[0] == candidates[0]
    assert GemmConfig(32, 64, 64, 2, 3, 8) in candidates  # the expert's decode config
    assert len(set(candidates)) == len(candidates) and all(c.launchable for c in candidates)


def test_neighbours_move_one_field_one_step_and_stay_launchable() -> None:
    config = GemmConfig(64, 128, 64, 4, 3, 8)
    found = neighbours(config)
    assert GemmConfig(128, 128, 64, 4, 3, 8) in found and GemmConfig(64, 128, 64, 4, 4, 8) in found
    for other in found:
        assert other.launchable
        assert sum(a != b for a, b in zip(other.as_tuple(), config.as_tuple(), strict=True)) == 1


def test_the_stored_oracle_names_its_gpu_and_method_and_covers_every_shape() -> None:
    oracle = load_oracle()
    assert oracle is not None
    assert oracle.gpu == "NVIDIA H200" and "autotune" in oracle.method
    assert set(oracle.entries) == set(grid_of(MEASURED, M_VALUES))
    for entry in oracle.entries.values():
        times = dict(entry.measured)
        assert entry.config in times  # the oracle's config was measured like every candidate
        assert entry.time_us > 0 and entry.cublas_us > 0
        assert entry.expert_us >= min(times.values())  # the expert is one of the candidates


def test_an_oracle_sweep_cut_short_is_refused() -> None:
    with pytest.raises(GemmTilingError, match="incomplete"):
        parse_oracle({"gpu": "x", "method": "y", "shapes": [], "complete": False})


MODEL_BEST = "GemmConfig(256, 64, 32, 8, 5, 1)"  # what the cost model would copy
MEASURED_BEST = "GemmConfig(128, 128, 64, 4, 5, 4)"  # what the GPU measured fastest


def gap_prompt(*, timed: bool) -> Prompt:
    """A parent trailing the model's best on one train shape and, when ``timed``, the GPU's
    best on another."""
    model_key, gpu_key = "M=2048 N=7168 K=8192", "gpu M=256 N=6144 K=4096"
    cases = [CaseResult(model_key, 30.0)]
    best = {model_key: BestCase(model_key, 10.0, MODEL_BEST, program_id="m")}
    if timed:
        cases.append(CaseResult(gpu_key, 60.0, detail="GemmConfig(64, 128, 64, 4, 3, 8)"))
        best[gpu_key] = BestCase(gpu_key, 40.0, MEASURED_BEST, program_id="g")
    return Prompt(
        job_id="job",
        problem="gemm-tiling-gpu",
        proposal_index=0,
        island=0,
        parent=ProgramView(id="parent", source=EXPERT_SOURCE, score=1.0, cases=tuple(cases)),
        inspirations=(),
        best_cases=best,
        context="",
        text="",
    )


def directed_answers(prompt: Prompt, seeds: range = range(40)) -> list[str]:
    directed = next(m for m in gemm_tiling_gpu_problem().mutations() if m.kind == "directed")
    return [directed.propose(prompt, np.random.default_rng(seed)) or "" for seed in seeds]


def test_directed_edits_chase_the_measured_best_once_the_parent_was_timed_on_the_gpu() -> None:
    timed = directed_answers(gap_prompt(timed=True))
    assert not any(MODEL_BEST in a for a in timed)  # the model's optimum is not a target
    assert sum(MEASURED_BEST in a for a in timed) > 10
    assert all("M * N" in a or "M " in a for a in timed if a)
    untimed = directed_answers(gap_prompt(timed=False))  # never reached the GPU: model cases
    assert sum(MODEL_BEST in a for a in untimed) > 10


def test_the_measured_view_keeps_only_gpu_cases_and_bests() -> None:
    prompt = gap_prompt(timed=True)
    view = measured_view(prompt)
    assert [c.key for c in view.parent.cases] == ["gpu M=256 N=6144 K=4096"]
    assert list(view.best_cases) == ["gpu M=256 N=6144 K=4096"]
    assert view.parent.source == prompt.parent.source and view.text == prompt.text
    assert measured_view(gap_prompt(timed=False)) == gap_prompt(timed=False)
    kinds = [m.kind for m in gemm_tiling_gpu_problem().mutations()]
    assert kinds == [m.kind for m in get_problem("gemm-tiling").mutations()]


def test_some_directed_rules_of_the_gpu_problem_are_bounded_in_m() -> None:
    # gap_prompt's GPU target is M=256 N=6144: an octave of M * N, sometimes with a band of M
    answers = directed_answers(gap_prompt(timed=True), range(200))
    rules = [line for a in answers for line in a.splitlines() if "if M * N" in line]
    banded = [line for line in rules if re.search(r"and M (>|<=) (128|256)\b", line)]
    assert rules and 0 < len(banded) < len(rules)


def test_the_gpu_problem_keeps_each_mutations_weight() -> None:
    from codevolve.problems.gemm_tiling.problem import gemm_tiling_problem

    gpu = [(m.kind, getattr(m, "weight", 1.0)) for m in gemm_tiling_gpu_problem().mutations()]
    model = [(m.kind, getattr(m, "weight", 1.0)) for m in gemm_tiling_problem().mutations()]
    assert gpu == model
    assert len({weight for _kind, weight in gpu}) > 1  # the weights differ: they were forwarded
