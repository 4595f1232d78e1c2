"""The two checks every problem gets from the cascade: the static guard before any stage, and the
validation of each stage's figures after it (through the real sandbox)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from codevolve.core.config import SandboxLimits
from codevolve.core.problem import Candidate, Threshold
from codevolve.core.program import CaseResult, ProgramStatus, StageResult
from codevolve.core.task import Task
from codevolve.evaluator_workers.cascade import run_cascade
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.static_guard import check_program

LIMITS = SandboxLimits(wall_s=2.0, cpu_s=2.0, memory_mb=256, output_bytes=4096)


# ----------------------------------------------------------------------------- the static guard


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("import codevolve\n", "imports the project's own package 'codevolve'"),
        ("import os, codevolve.core as c\n", "'codevolve.core'"),
        ("from codevolve.problems import registry\n", "imports from the project's own package"),
        ("m = __import__('codevolve.evaluator_workers')\n", "names the project's own module"),
        ("import importlib\nimportlib.import_module('codevolve')\n", "names the project's own"),
        ("import sys\nm = sys.modules['codevolve.evaluator_workers._cage']\n", "own module"),
        ("import sys\nf = sys._getframe(1)\n", "(_getframe)"),
        ("import inspect\nf = inspect.currentframe().f_back\n", "(currentframe)"),
        ("try:\n    1 / 0\nexcept Exception as e:\n    g = e.__traceback__.tb_frame\n", "tb_frame"),
        ("import gc\nobjects = gc.get_objects()\n", "(get_objects)"),
        ("def f():\n    yield\ng = f().gi_frame.f_globals\n", "(gi_frame)"),
    ],
)
def test_the_guard_refuses_reaching_for_the_project_or_the_callers_frames(
    source: str, reason: str
) -> None:
    issues = check_program(source)
    assert issues, source
    assert any(reason in str(issue) for issue in issues), issues
    assert str(issues[0]).startswith(f"line {issues[0].line}: ")


@pytest.mark.parametrize(
    "source",
    [
        '"""Evolved for codevolve; see codevolve.problems for the task."""\n',
        "# import codevolve\nx = 1\n",
        "codevolve = 3\nlabel = 'codevolve is the service that runs me'\n",
        "from . import sibling\n",  # fails to load in the sandbox, but names nothing of ours
        "import collections, math\nfrom typing import NamedTuple\n",
        "def f(:\n",  # a syntax error is the sandbox's to report, with its own message
    ],
)
def test_the_guard_lets_ordinary_programs_and_mentions_through(source: str) -> None:
    assert check_program(source) == ()


# ----------------------------------------------------------------------------- stage figures


@dataclass(frozen=True, slots=True)
class EchoStage:
    """A lax stage, like an adapter for evaluators that share the candidate's process: it takes
    the candidate's ``metrics()`` at face value and derives a score from them."""

    name: str = "echo"
    threshold: Threshold | None = None

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        del rng
        reply = candidate.call("metrics", [[]])
        if not reply.ok or reply.values is None:
            return StageResult(stage=self.name, passed=False, score=None, error=reply.error)
        (claimed,) = reply.values
        assert isinstance(claimed, dict)
        score, scale = claimed["score"], claimed.get("scale", 1.0)
        assert isinstance(scale, float)
        scaled = score * scale * scale if isinstance(score, float) else 0.0  # may overflow
        return StageResult(
            stage=self.name,
            passed=True,
            score=score,  # type: ignore[arg-type]  # whatever came back: the cascade judges it
            metrics={"spread": scaled - scaled, "scaled": scaled},  # inf - inf is NaN
            cases=(CaseResult(key="only", cost=claimed.get("cost", 1.0)),),  # type: ignore[arg-type]
        )


@dataclass(frozen=True, slots=True)
class EchoProblem:
    name: str = "echo"
    stages: Sequence[EchoStage] = (EchoStage(),)


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(size=1) as started:
        yield started


def _evaluate(pool: SandboxPool, metrics: str) -> tuple[ProgramStatus, str | None]:
    source = f"def metrics():\n    return {metrics}\n"
    task = Task(
        program_id=uuid.uuid4().hex, job_id="security", problem="echo", source=source, seed=0,
        limits=LIMITS,
    )  # fmt: skip
    evaluation = run_cascade(EchoProblem(), task, pool, worker="security")  # type: ignore[arg-type]
    return evaluation.status, evaluation.error


@pytest.mark.parametrize(
    ("metrics", "reason"),
    [
        ("{'score': 0.5}", None),
        ("{'score': 5e-324, 'scale': 1e-200}", None),  # tiny but finite: fine
        ("{'score': 0.5, 'scale': 1e300}", "metric 'spread' is nan"),  # overflow in the stage
        ("{'score': 10 ** 20}", "score is 1e+20, beyond 1e+12"),
        ("{'score': '0.9'}", "score is a str, not a number"),
        ("{'score': True}", "score is a bool, not a number"),
        ("{'score': 0.5, 'cost': -1.0}", "cost of case 'only' is negative"),
        ("{'score': 0.5, 'cost': 1e300}", "cost of case 'only' is 1e+300"),
    ],
)
def test_figures_that_are_not_finite_sane_numbers_fail_the_program(
    pool: SandboxPool, metrics: str, reason: str | None
) -> None:
    status, error = _evaluate(pool, metrics)
    if reason is None:
        assert status is ProgramStatus.EVALUATED, error
        return
    assert status is ProgramStatus.FAILED
    assert error is not None and "stage echo produced invalid figures" in error
    assert reason in error


def test_a_guarded_program_never_reaches_the_sandbox(pool: SandboxPool) -> None:
    status, error = _evaluate(pool, "__import__('codevolve').__name__")
    assert status is ProgramStatus.FAILED
    assert error is not None and error.startswith("refused before running: line 2:")
