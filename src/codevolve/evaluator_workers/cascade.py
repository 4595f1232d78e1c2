"""Runs one program through its problem's cascade of stages, cheap stages first.

Stages are trusted code; the candidate runs only inside the sandbox, through the
:class:`SandboxedCandidate` handle the stages receive. A stage that finds the candidate failing
returns a failed result; a stage that raises has a bug, which fails only this program.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence

import numpy as np

from codevolve.core.config import SandboxLimits
from codevolve.core.problem import JSONValue, Problem, SandboxReply, Stage, Threshold
from codevolve.core.program import Evaluation, ProgramStatus, StageResult
from codevolve.core.task import Task
from codevolve.evaluator_workers.errors import SandboxUnavailable
from codevolve.evaluator_workers.sandbox import SandboxPool

log = logging.getLogger(__name__)


class SandboxedCandidate:
    """A program as a stage sees it: its source, callable only inside the sandbox."""

    def __init__(self, source: str, *, limits: SandboxLimits, pool: SandboxPool) -> None:
        self._source = source
        self._limits = limits
        self._pool = pool

    @property
    def source(self) -> str:
        return self._source

    def call(self, entry: str, args: Sequence[Sequence[JSONValue]]) -> SandboxReply:
        return self._pool.call(self._source, entry, args, self._limits)


def run_cascade(problem: Problem, task: Task, pool: SandboxPool, *, worker: str) -> Evaluation:
    """Run the stages in order until one does not pass.

    The evaluation is ``evaluated`` when every stage passes, ``rejected`` when a score falls below
    a stage's threshold, ``failed`` on an error. Raises only SandboxUnavailable: then no candidate
    can run on this worker, and the task should go to another.
    """
    candidate = SandboxedCandidate(task.source, limits=task.limits, pool=pool)
    rng = np.random.default_rng(task.seed)  # fresh inputs per evaluation, reproducible
    started = time.perf_counter()
    results: list[StageResult] = []
    status = ProgramStatus.EVALUATED
    name = ""
    try:
        for stage in problem.stages:
            name = stage.name
            result, status = _run_stage(stage, candidate, rng, task.parent_scores.get(name))
            results.append(result)
            if status is not ProgramStatus.EVALUATED:
                break
    except SandboxUnavailable:
        raise
    except Exception as exc:  # the per-task boundary: a bug in trusted code fails this program only
        log.exception(
            "internal error in stage %r of program %s (job %s)", name, task.program_id, task.job_id
        )
        error = f"internal: {type(exc).__name__}: {exc}"
        results.append(StageResult(stage=name, passed=False, score=None, error=error))
        status = ProgramStatus.FAILED
    return Evaluation(
        program_id=task.program_id,
        job_id=task.job_id,
        status=status,
        stages=tuple(results),
        worker=worker,
        duration_s=time.perf_counter() - started,
    )


def _run_stage(
    stage: Stage,
    candidate: SandboxedCandidate,
    rng: np.random.Generator,
    parent_score: float | None,
) -> tuple[StageResult, ProgramStatus]:
    """The stage's result (its duration measured here) and where it leaves the program."""
    started = time.perf_counter()
    result = stage.run(candidate, rng)
    result = dataclasses.replace(result, stage=stage.name, duration_s=time.perf_counter() - started)
    if not result.passed:
        # A stage that says "not passed" failed its own check (a static check, say): an error.
        error = result.error or result.feedback or f"stage {stage.name} did not pass"
        return dataclasses.replace(result, error=error), ProgramStatus.FAILED
    threshold = stage.threshold
    if threshold is not None and not threshold.passes(result.score, parent_score):
        note = _below_threshold(threshold, result.score, parent_score)
        feedback = f"{result.feedback}\n{note}" if result.feedback else note
        return dataclasses.replace(result, passed=False, feedback=feedback), ProgramStatus.REJECTED
    return result, ProgramStatus.EVALUATED


def _below_threshold(threshold: Threshold, score: float | None, parent_score: float | None) -> str:
    wanted = []
    if threshold.absolute is not None:
        wanted.append(f"at least {threshold.absolute:g}")
    if threshold.relative is not None and parent_score is not None:
        wanted.append(f"at least {threshold.relative:g} x the parent's {parent_score:g}")
    shown = "no score" if score is None else f"score {score:g}"
    return f"rejected: {shown}; the stage wants {' and '.join(wanted) or 'a score'}"
