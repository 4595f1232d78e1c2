"""Runs one program through its problem's cascade of stages, cheap stages first.

Stages are trusted code; the candidate runs only inside the sandbox, through the
:class:`SandboxedCandidate` handle the stages receive. A stage that finds the candidate failing
returns a failed result; a stage that raises has a bug, which fails only this program.

Two checks hold for every problem. Before any stage, :mod:`.static_guard` refuses programs that
import this project or reach into the interpreter's frames. After each stage, its figures are
validated: scores, metrics, features and case costs must be finite real numbers of a sane
magnitude, so that a NaN, an infinity or a 1e300 computed from a candidate's output can never
enter the archive as a "best" program.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping, Sequence

import numpy as np

from codevolve.core.config import SandboxLimits
from codevolve.core.device import CPU, Device, DeviceStage, capability_of
from codevolve.core.launch_store import StoredTiming
from codevolve.core.problem import JSONValue, Problem, SandboxReply, Stage, Threshold
from codevolve.core.program import Evaluation, ProgramStatus, StageResult
from codevolve.core.task import Task
from codevolve.evaluator_workers.errors import SandboxUnavailable
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.static_guard import STAGE_NAME as GUARD_STAGE
from codevolve.evaluator_workers.static_guard import check_program

log = logging.getLogger(__name__)

MAX_MAGNITUDE = 1e12  # no score, metric, feature or cost of any problem is larger in size


class SandboxedCandidate:
    """A program as a stage sees it: its source, callable only inside the sandbox."""

    def __init__(
        self,
        source: str,
        *,
        limits: SandboxLimits,
        pool: SandboxPool,
        stored_timings: tuple[StoredTiming, ...] = (),
        remeasure: int = 0,
    ) -> None:
        self._source = source
        self._limits = limits
        self._pool = pool
        # what the launch store holds for this program's launches (core/launch_store.py)
        self.stored_timings = stored_timings
        # the task's Task.remeasure: 0 for an evaluation that selection reads, k >= 1 for the
        # k-th sample confirming a would-be best (a stage may time its held-out cases then)
        self.remeasure = remeasure

    @property
    def source(self) -> str:
        return self._source

    def call(self, entry: str, args: Sequence[Sequence[JSONValue]]) -> SandboxReply:
        return self._pool.call(self._source, entry, args, self._limits)

    def call_harness(
        self, harness: str, entry: str, args: Sequence[Sequence[JSONValue]]
    ) -> SandboxReply:
        return self._pool.call(harness, entry, args, self._limits)


def run_cascade(
    problem: Problem,
    task: Task,
    pool: SandboxPool,
    *,
    worker: str,
    device: Device | None = None,
) -> Evaluation:
    """Run the stages in order, from ``task.start_stage``, until one does not pass.

    The evaluation is ``evaluated`` when every stage passes or when a score falls below a
    threshold that only stops the cascade (``Threshold.rejects`` false, or the job's initial
    program: kept with the stages it ran), ``rejected`` when it falls below one that rejects,
    ``failed`` on an error. A stage needing a capability this worker lacks
    (a GPU stage, without ``device``) stops the run with the stages so far and ``handoff`` set to
    that capability. Raises only SandboxUnavailable: then no candidate can run on this worker,
    and the task should go to another.
    """
    candidate = SandboxedCandidate(
        task.source,
        limits=task.limits,
        pool=pool,
        stored_timings=task.stored_timings,
        remeasure=task.remeasure,
    )
    # Fresh inputs per evaluation, reproducible; a resumed cascade draws from its own stream.
    seed = task.seed if task.start_stage == 0 else [task.seed, task.start_stage]
    rng = np.random.default_rng(seed)
    capabilities = {CPU} if device is None else {CPU, device.capability}
    started = time.perf_counter()
    results: list[StageResult] = list(task.prior_stages)
    status = ProgramStatus.EVALUATED
    handoff: str | None = None
    name = GUARD_STAGE
    try:
        issues = check_program(task.source)
    except Exception as exc:  # the per-task boundary, as below
        log.exception("internal error in the static guard of program %s", task.program_id)
        issues = ()
        results.append(
            StageResult(stage=name, passed=False, score=None, error=f"internal: {exc!r}")
        )
        status = ProgramStatus.FAILED
    if issues:
        shown = "; ".join(str(issue) for issue in issues[:3])
        error = f"refused before running: {shown}" + (
            f" (+{len(issues) - 3} more)" if len(issues) > 3 else ""
        )
        guard = StageResult(stage=GUARD_STAGE, passed=False, score=None, error=error)
        return Evaluation(
            program_id=task.program_id,
            job_id=task.job_id,
            status=ProgramStatus.FAILED,
            stages=(guard,),
            worker=worker,
            duration_s=time.perf_counter() - started,
            remeasure=task.remeasure,
        )
    try:
        for stage in (
            problem.stages[task.start_stage :] if status is ProgramStatus.EVALUATED else ()
        ):
            name = stage.name
            if capability_of(stage) not in capabilities:
                handoff = capability_of(stage)
                break
            parent_score = task.parent_scores.get(name)
            result, status = _run_stage(stage, candidate, rng, parent_score, device)
            below = status is ProgramStatus.REJECTED
            if below and (task.initial or not _rejects(stage)):
                result, status = _stopped(result), ProgramStatus.EVALUATED
            results.append(result)
            if below or status is not ProgramStatus.EVALUATED:
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
        handoff=handoff if status is ProgramStatus.EVALUATED else None,
        remeasure=task.remeasure,
    )


def _run_stage(
    stage: Stage,
    candidate: SandboxedCandidate,
    rng: np.random.Generator,
    parent_score: float | None,
    device: Device | None = None,
) -> tuple[StageResult, ProgramStatus]:
    """The stage's result (its duration measured here) and where it leaves the program."""
    started = time.perf_counter()
    if device is not None and isinstance(stage, DeviceStage) and capability_of(stage) != CPU:
        result = stage.run_on(candidate, device, rng)
    else:
        result = stage.run(candidate, rng)
    result = dataclasses.replace(result, stage=stage.name, duration_s=time.perf_counter() - started)
    invalid = invalid_figures(result)
    if invalid is not None:
        error = f"stage {stage.name} produced invalid figures: {invalid}"
        failed = dataclasses.replace(result, passed=False, score=None, error=error)
        return failed, ProgramStatus.FAILED
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


def _rejects(stage: Stage) -> bool:
    return stage.threshold is None or stage.threshold.rejects


def _stopped(result: StageResult) -> StageResult:
    """A stage below a threshold that only stops the cascade: its figures stand (the program is
    kept with them, its score the stage's), and its feedback says the later stages did not run."""
    note = result.feedback.replace("rejected: ", "stopped here: ", 1)
    return dataclasses.replace(result, passed=True, feedback=f"{note}; later stages did not run")


def invalid_figures(result: StageResult) -> str | None:
    """Why the figures of a stage's result cannot be trusted, or None when they can."""
    if result.score is not None:
        problem = _invalid_number(result.score)
        if problem is not None:
            return f"score {problem}"
    named: tuple[tuple[str, Mapping[str, float]], ...] = (
        ("metric", result.metrics),
        ("held-out metric", result.heldout),
        ("feature", result.features),
    )
    for what, figures in named:
        for key, value in figures.items():
            problem = _invalid_number(value)
            if problem is not None:
                return f"{what} {key!r} {problem}"
    for case in result.cases:
        problem = _invalid_number(case.cost)
        if problem is None and case.cost < 0:
            problem = f"is negative ({case.cost!r})"
        if problem is not None:
            return f"cost of case {case.key!r} {problem}"
    return None


def _invalid_number(value: object) -> str | None:
    if type(value) not in (int, float) and not isinstance(value, np.floating | np.integer):
        return f"is a {type(value).__name__}, not a number"
    number = float(value)  # type: ignore[arg-type]  # a real number, checked above
    if not math.isfinite(number):
        return f"is {number!r}"
    if abs(number) > MAX_MAGNITUDE:
        return f"is {number:g}, beyond {MAX_MAGNITUDE:g}"
    return None


def _below_threshold(threshold: Threshold, score: float | None, parent_score: float | None) -> str:
    wanted = []
    if threshold.absolute is not None:
        wanted.append(f"at least {threshold.absolute:g}")
    if threshold.relative is not None and parent_score is not None:
        wanted.append(f"at least {threshold.relative:g} x the parent's {parent_score:g}")
    shown = "no score" if score is None else f"score {score:g}"
    return f"rejected: {shown}; the stage wants {' and '.join(wanted) or 'a score'}"
