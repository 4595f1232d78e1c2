"""The cascade runner with a two-stage fake problem, the candidate run in a real sandbox."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from codevolve.core.config import SandboxLimits
from codevolve.core.problem import Baseline, Candidate, FeatureSpec, Mutation, Stage, Threshold
from codevolve.core.program import ProgramStatus, StageResult
from codevolve.core.task import Task
from codevolve.evaluator_workers.cascade import run_cascade
from codevolve.evaluator_workers.errors import SandboxUnavailable
from codevolve.evaluator_workers.sandbox import SandboxPool

LIMITS = SandboxLimits(wall_s=5.0, cpu_s=5.0, memory_mb=256, output_bytes=4096)
GOOD = "def value(x):\n    return 2 * x\n"  # total over the inputs: twice their sum


@dataclass(frozen=True)
class TotalStage:
    """Calls ``value`` on inputs drawn from the rng; scores the total of what comes back."""

    name: str
    threshold: Threshold | None = None
    inputs: int = 3

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        drawn = [int(x) for x in rng.integers(1, 100, size=self.inputs)]
        reply = candidate.call("value", [[x] for x in drawn])
        if not reply.ok or reply.values is None:
            error = f"{reply.error_kind}: {reply.error}"
            return StageResult(stage=self.name, passed=False, score=None, error=error)
        total = float(sum(v for v in reply.values if isinstance(v, int | float)))
        return StageResult(
            stage=self.name, passed=True, score=total, metrics={"first_input": float(drawn[0])}
        )


@dataclass(frozen=True)
class RefusingStage:
    """A static check that refuses every program, without an error of the candidate."""

    name: str = "static"
    threshold: Threshold | None = None

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        return StageResult(stage=self.name, passed=False, score=None, feedback="branch 2 unsafe")


@dataclass(frozen=True)
class BuggyStage:
    name: str = "buggy"
    threshold: Threshold | None = None

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        return StageResult(stage=self.name, passed=True, score=1 / 0)


@dataclass(frozen=True)
class FakeProblem:
    stages: Sequence[Stage] = field(
        default_factory=lambda: (
            TotalStage("quick", inputs=1),
            TotalStage("full", threshold=Threshold(relative=1.0)),
        )
    )
    name: str = "fake"
    description: str = "double the input"
    initial_program: str = GOOD
    features: Sequence[FeatureSpec] = ()

    def mutations(self) -> Sequence[Mutation]:
        return ()

    def baselines(self) -> Sequence[Baseline]:
        return ()


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(size=1) as started:
        yield started


def _task(
    source: str = GOOD, *, seed: int = 7, parent_scores: dict[str, float] | None = None
) -> Task:
    return Task(
        program_id="program-1",
        job_id="job-1",
        problem="fake",
        source=source,
        seed=seed,
        parent_scores=parent_scores or {},
        limits=LIMITS,
    )


def test_a_program_passing_every_stage_is_evaluated_with_each_stage_timed(
    pool: SandboxPool,
) -> None:
    evaluation = run_cascade(FakeProblem(), _task(), pool, worker="w-0")
    assert evaluation.status is ProgramStatus.EVALUATED
    assert [s.stage for s in evaluation.stages] == ["quick", "full"]
    assert all(s.passed and s.duration_s > 0 for s in evaluation.stages)
    assert evaluation.score == evaluation.stages[-1].score
    assert evaluation.duration_s >= sum(s.duration_s for s in evaluation.stages)
    assert (evaluation.program_id, evaluation.job_id, evaluation.worker) == (
        "program-1",
        "job-1",
        "w-0",
    )


def test_a_score_below_the_parents_is_rejected_by_the_relative_threshold(pool: SandboxPool) -> None:
    own = run_cascade(FakeProblem(), _task(), pool, worker="w").stages[-1].score
    assert own is not None
    worse = run_cascade(FakeProblem(), _task(parent_scores={"full": own + 1}), pool, worker="w")
    assert worse.status is ProgramStatus.REJECTED
    assert worse.score is None
    assert worse.error is None
    last = worse.stages[-1]
    assert (last.stage, last.passed, last.score) == ("full", False, own)
    assert "rejected" in last.feedback and "parent" in last.feedback
    as_good = run_cascade(FakeProblem(), _task(parent_scores={"full": own}), pool, worker="w")
    assert as_good.status is ProgramStatus.EVALUATED


def test_a_threshold_that_only_stops_keeps_the_program_with_the_stages_it_ran(
    pool: SandboxPool,
) -> None:
    stopping = FakeProblem(
        stages=(
            TotalStage("quick", inputs=1, threshold=Threshold(absolute=1e6, rejects=False)),
            TotalStage("full"),
        )
    )
    evaluation = run_cascade(stopping, _task(), pool, worker="w")
    assert evaluation.status is ProgramStatus.EVALUATED
    assert [s.stage for s in evaluation.stages] == ["quick"]
    assert evaluation.stages[0].passed
    assert evaluation.score == evaluation.stages[0].score
    assert "stopped here" in evaluation.feedback
    assert "later stages did not run" in evaluation.feedback


def test_the_initial_program_is_kept_below_a_rejecting_threshold(pool: SandboxPool) -> None:
    own = run_cascade(FakeProblem(), _task(), pool, worker="w").stages[-1].score
    assert own is not None
    task = dataclasses.replace(_task(parent_scores={"full": own + 1}), initial=True)
    evaluation = run_cascade(FakeProblem(), task, pool, worker="w")
    assert evaluation.status is ProgramStatus.EVALUATED
    assert evaluation.score == own


def test_a_candidate_error_in_the_sandbox_fails_the_program_at_that_stage(
    pool: SandboxPool,
) -> None:
    source = "def value(x):\n    raise RuntimeError('no')\n"
    evaluation = run_cascade(FakeProblem(), _task(source), pool, worker="w")
    assert evaluation.status is ProgramStatus.FAILED
    assert [s.stage for s in evaluation.stages] == ["quick"]
    assert evaluation.error is not None
    assert evaluation.error.startswith("exception:")
    assert "RuntimeError: no" in evaluation.error


def test_a_stage_that_does_not_pass_fails_the_program_with_its_feedback(pool: SandboxPool) -> None:
    problem = FakeProblem(stages=(RefusingStage(), TotalStage("full")))
    evaluation = run_cascade(problem, _task(), pool, worker="w")
    assert evaluation.status is ProgramStatus.FAILED
    assert [s.stage for s in evaluation.stages] == ["static"]
    assert evaluation.error == "branch 2 unsafe"


def test_a_bug_in_a_stage_fails_only_this_program_and_is_logged_with_its_ids(
    pool: SandboxPool, caplog: pytest.LogCaptureFixture
) -> None:
    problem = FakeProblem(stages=(TotalStage("quick"), BuggyStage()))
    with caplog.at_level(logging.ERROR, logger="codevolve.evaluator_workers.cascade"):
        evaluation = run_cascade(problem, _task(), pool, worker="w")
    assert evaluation.status is ProgramStatus.FAILED
    assert [s.stage for s in evaluation.stages] == ["quick", "buggy"]
    assert evaluation.error == "internal: ZeroDivisionError: division by zero"
    (record,) = caplog.records
    assert "program-1" in record.getMessage() and "job-1" in record.getMessage()
    assert record.exc_info is not None


def test_stages_draw_their_inputs_from_the_tasks_seed(pool: SandboxPool) -> None:
    def first_inputs(seed: int) -> list[float]:
        evaluation = run_cascade(FakeProblem(), _task(seed=seed), pool, worker="w")
        return [s.metrics["first_input"] for s in evaluation.stages]

    assert first_inputs(1) == first_inputs(1)
    assert first_inputs(1) != first_inputs(2)


def test_a_closed_sandbox_raises_instead_of_failing_the_program() -> None:
    closed = SandboxPool(size=1)
    closed.start()
    closed.close()
    with pytest.raises(SandboxUnavailable):
        run_cascade(FakeProblem(), _task(), closed, worker="w")
