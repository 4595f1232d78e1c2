"""Bundle stages run evaluator.py inside the real sandbox and judge what comes back.

One evaluator serves every case: it imports the candidate and does what the candidate's ``MODE``
asks (return a dict, an EvaluationResult, raise, hang, return NaN...), so each test is one call.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import pytest

from codevolve.core.config import SandboxLimits
from codevolve.core.program import ProgramStatus, StageResult
from codevolve.core.task import Task
from codevolve.evaluator_workers.cascade import SandboxedCandidate, run_cascade
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.problems.openevolve import OpenEvolveProblem, make_bundle
from codevolve.problems.openevolve.problem import MAX_ARTIFACT_CHARS, MAX_METRICS

EVALUATOR = """\
import importlib.util
import math
import os
import sys
import time

from openevolve.evaluation_result import EvaluationResult

import helper

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "data", "value.txt")) as handle:
    DATA = float(handle.read())


def _mode(path):
    spec = importlib.util.spec_from_file_location("candidate_program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MODE


def evaluate(program_path):
    mode = _mode(program_path)
    if mode == "dict":
        return {"combined_score": helper.double(DATA), "note": "a text metric", "ok": True}
    if mode == "result":
        return EvaluationResult(
            metrics={"accuracy": 0.5, "speed": 1.5},
            artifacts={"llm_feedback": "widen the loop", "raw": b"bytes"},
        )
    if mode == "raise":
        raise ValueError("the program is wrong")
    if mode == "hang":
        while True:
            pass
    if mode == "nan":
        return {"a": float("nan"), "b": 0.75, "c": float("inf")}
    if mode == "nan_combined":
        return {"combined_score": float("nan"), "b": 0.75}
    if mode == "stderr":
        print("diagnostics on stderr", file=sys.stderr)
        return {"combined_score": 1.0}
    if mode == "none":
        return None
    if mode == "text_only":
        return {"error": "could not run"}
    if mode == "huge":
        artifacts = {f"a{i}": "x" * 10000 for i in range(20)}
        artifacts["llm_feedback"] = "keep me"
        metrics = {"combined_score": 1.0, **{f"m{i}": i for i in range(1000)}}
        return EvaluationResult(metrics=metrics, artifacts=artifacts)
    if mode == "where":
        suffix = os.path.splitext(program_path)[1]
        cwd = os.getcwd() == HERE
        return {"combined_score": 1.0, "suffix_ok": suffix == ".py", "cwd_ok": cwd}
    raise KeyError(mode)
"""


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(size=1) as running:
        yield running


def bundle_files(evaluator: str = EVALUATOR, config: str = "") -> dict[str, bytes]:
    return {
        "initial_program.py": b'MODE = "dict"\n',
        "evaluator.py": evaluator.encode(),
        "helper.py": b"def double(x):\n    return 2 * x\n",
        "data/value.txt": b"0.25\n",
        "config.yaml": config.encode(),
    }


@pytest.fixture(scope="module")
def problem() -> OpenEvolveProblem:
    return OpenEvolveProblem(make_bundle(bundle_files()))


def run(
    problem: OpenEvolveProblem, pool: SandboxPool, mode: str, wall_s: float = 5.0
) -> StageResult:
    limits = SandboxLimits(wall_s=wall_s, cpu_s=wall_s)
    candidate = SandboxedCandidate(f'MODE = "{mode}"\n', limits=limits, pool=pool)
    return problem.stages[0].run(candidate, np.random.default_rng(0))


def test_a_dict_is_scored_by_combined_score_using_helpers_and_data_files(
    problem: OpenEvolveProblem, pool: SandboxPool
) -> None:
    result = run(problem, pool, "dict")
    assert result.passed and result.score == 0.5
    assert result.metrics == {"combined_score": 0.5, "ok": 1.0}
    assert "note: a text metric" in result.feedback
    assert "openevolve" not in sys.modules  # the stand-in exists only in the sandbox


def test_an_evaluation_result_brings_its_artifacts_into_the_feedback(
    problem: OpenEvolveProblem, pool: SandboxPool
) -> None:
    result = run(problem, pool, "result")
    assert result.passed and result.score == 1.0  # mean of accuracy and speed
    assert result.artifacts["llm_feedback"] == "widen the loop"
    assert result.artifacts["raw"] == "bytes"
    assert result.feedback.startswith("llm_feedback:\nwiden the loop")


def test_an_evaluator_that_raises_fails_the_program_with_its_traceback(
    problem: OpenEvolveProblem, pool: SandboxPool
) -> None:
    result = run(problem, pool, "raise")
    assert not result.passed and result.score is None
    assert result.error == "exception: evaluate raised ValueError: the program is wrong"
    assert "ValueError: the program is wrong" in result.artifacts["traceback"]
    assert "the program is wrong" in result.feedback


def test_a_hang_times_out_and_does_not_poison_the_next_evaluation(
    problem: OpenEvolveProblem, pool: SandboxPool
) -> None:
    result = run(problem, pool, "hang", wall_s=1.0)
    assert not result.passed and result.error is not None
    assert result.error.startswith("timeout:")
    assert run(problem, pool, "dict").score == 0.5


def test_nan_and_infinite_metrics_are_left_out_of_the_score_and_reported(
    problem: OpenEvolveProblem, pool: SandboxPool
) -> None:
    result = run(problem, pool, "nan")
    assert result.passed and result.score == 0.75
    assert result.metrics == {"b": 0.75}
    assert "a is nan; left out of the score" in result.feedback
    assert "c is inf; left out of the score" in result.feedback


def test_a_nan_combined_score_fails_the_program(
    problem: OpenEvolveProblem, pool: SandboxPool
) -> None:
    result = run(problem, pool, "nan_combined")
    assert not result.passed and result.error == "combined_score is nan, not a finite number"


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("none", "exception: evaluate returned a NoneType, not a dict or an EvaluationResult"),
        ("text_only", "evaluate returned no finite numeric metric"),
    ],
)
def test_results_without_a_score_fail_the_program(
    problem: OpenEvolveProblem, pool: SandboxPool, mode: str, error: str
) -> None:
    result = run(problem, pool, mode)
    assert not result.passed and result.error == error


def test_stderr_reaches_the_feedback_and_the_program_runs_as_in_openevolve(
    problem: OpenEvolveProblem, pool: SandboxPool
) -> None:
    result = run(problem, pool, "stderr")
    assert result.passed and "diagnostics on stderr" in result.artifacts["stderr"]
    where = run(problem, pool, "where")
    assert where.metrics["suffix_ok"] == 1.0 and where.metrics["cwd_ok"] == 1.0


def test_huge_results_are_bounded_keeping_the_score_and_llm_feedback(
    problem: OpenEvolveProblem, pool: SandboxPool
) -> None:
    result = run(problem, pool, "huge")
    assert result.passed and result.score == 1.0
    assert len(result.metrics) == MAX_METRICS
    assert result.artifacts["llm_feedback"] == "keep me"
    assert sum(len(text) for text in result.artifacts.values()) < MAX_ARTIFACT_CHARS + 100


CASCADE = """\
import importlib.util


def _value(path, name):
    spec = importlib.util.spec_from_file_location("candidate_program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def evaluate_stage1(program_path):
    return {"combined_score": _value(program_path, "QUICK")}


def evaluate_stage2(program_path):
    return {"combined_score": _value(program_path, "FULL"), "full": 1.0}
"""


def _cascade_task(problem: OpenEvolveProblem, quick: float, *, initial: bool = False) -> Task:
    return Task(
        program_id="p",
        job_id="j",
        problem=problem.name,
        source=f"QUICK = {quick}\nFULL = 3.0\n",
        seed=0,
        limits=SandboxLimits(wall_s=5, cpu_s=5),
        initial=initial,
    )


@pytest.mark.parametrize(("quick", "stages", "score"), [(0.8, 2, 3.0), (0.2, 1, 0.2)])
def test_a_program_below_a_threshold_stops_there_and_is_kept_with_its_stage_score(
    pool: SandboxPool, quick: float, stages: int, score: float
) -> None:
    files = bundle_files(CASCADE, "evaluator:\n  cascade_thresholds: [0.5]\n")
    cascade = OpenEvolveProblem(make_bundle(files))
    evaluation = run_cascade(cascade, _cascade_task(cascade, quick), pool, worker="test")
    assert evaluation.status is ProgramStatus.EVALUATED
    assert [s.stage for s in evaluation.stages] == ["stage1", "stage2"][:stages]
    assert evaluation.score == score
    assert evaluation.metrics["combined_score"] == score
    if stages == 1:
        assert evaluation.stages[0].passed
        assert "stopped here: score 0.2; the stage wants at least 0.5" in evaluation.feedback
        assert "later stages did not run" in evaluation.feedback


HARD_GATE = "evaluator:\n  cascade_thresholds: [0.5]\n  cascade_thresholds_reject: true\n"


def test_with_the_hard_gate_a_program_below_a_threshold_is_rejected(pool: SandboxPool) -> None:
    cascade = OpenEvolveProblem(make_bundle(bundle_files(CASCADE, HARD_GATE)))
    evaluation = run_cascade(cascade, _cascade_task(cascade, 0.2), pool, worker="test")
    assert evaluation.status is ProgramStatus.REJECTED
    assert [s.stage for s in evaluation.stages] == ["stage1"]
    assert evaluation.score is None
    assert "rejected: score 0.2" in evaluation.feedback


def test_the_initial_program_below_a_hard_gate_is_kept_with_its_stage_score(
    pool: SandboxPool,
) -> None:
    cascade = OpenEvolveProblem(make_bundle(bundle_files(CASCADE, HARD_GATE)))
    task = _cascade_task(cascade, 0.2, initial=True)
    evaluation = run_cascade(cascade, task, pool, worker="test")
    assert evaluation.status is ProgramStatus.EVALUATED
    assert [s.stage for s in evaluation.stages] == ["stage1"]
    assert evaluation.score == 0.2


def test_feature_dimensions_come_from_metrics_and_stay_out_of_the_score(
    pool: SandboxPool,
) -> None:
    config = "database:\n  feature_dimensions: [complexity, accuracy]\n  feature_bins: 3\n"
    problem = OpenEvolveProblem(make_bundle(bundle_files(config=config)))
    assert [(f.name, f.bins) for f in problem.features] == [("complexity", 3), ("accuracy", 3)]
    result = run(problem, pool, "result")
    assert result.features == {"accuracy": 0.5, "complexity": float(len('MODE = "result"\n'))}
    assert result.score == 1.5  # speed alone: accuracy is a feature dimension
