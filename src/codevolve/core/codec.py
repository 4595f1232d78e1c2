"""Plain-data (JSON-ready) forms of the values that cross process boundaries: tasks, evaluations."""

from __future__ import annotations

from typing import Any

from codevolve.core.config import SandboxLimits
from codevolve.core.launch_store import LaunchKey, StoredTiming
from codevolve.core.measurement import Remeasure, Spread, SpreadOver, Verdict
from codevolve.core.program import CaseResult, Evaluation, ProgramStatus, StageResult
from codevolve.core.task import Task


def task_to_dict(task: Task) -> dict[str, Any]:
    return {
        "program_id": task.program_id,
        "job_id": task.job_id,
        "problem": task.problem,
        "source": task.source,
        "seed": task.seed,
        "parent_scores": dict(task.parent_scores),
        "limits": task.limits.model_dump(),
        "attempt": task.attempt,
        "capability": task.capability,
        "start_stage": task.start_stage,
        "prior_stages": [stage_to_dict(s) for s in task.prior_stages],
        "remeasure": task.remeasure,
        "initial": task.initial,
        "stored_timings": [timing_to_list(t) for t in task.stored_timings],
    }


def task_from_dict(data: dict[str, Any]) -> Task:
    return Task(
        program_id=str(data["program_id"]),
        job_id=str(data["job_id"]),
        problem=str(data["problem"]),
        source=str(data["source"]),
        seed=int(data["seed"]),
        parent_scores={str(k): float(v) for k, v in data.get("parent_scores", {}).items()},
        limits=SandboxLimits.model_validate(data.get("limits", {})),
        attempt=int(data.get("attempt", 1)),
        capability=str(data.get("capability", "cpu")),
        start_stage=int(data.get("start_stage", 0)),
        prior_stages=tuple(stage_from_dict(s) for s in data.get("prior_stages", [])),
        remeasure=int(data.get("remeasure", 0)),
        initial=bool(data.get("initial", False)),
        stored_timings=tuple(timing_from_list(t) for t in data.get("stored_timings", [])),
    )


def case_to_list(case: CaseResult) -> list[Any]:
    return [case.key, case.cost, case.detail]


def case_from_list(data: list[Any]) -> CaseResult:
    return CaseResult(key=str(data[0]), cost=float(data[1]), detail=str(data[2]))


def stage_to_dict(stage: StageResult) -> dict[str, Any]:
    return {
        "stage": stage.stage,
        "passed": stage.passed,
        "score": stage.score,
        "metrics": dict(stage.metrics),
        "heldout": dict(stage.heldout),
        "features": dict(stage.features),
        "cases": [case_to_list(c) for c in stage.cases],
        "feedback": stage.feedback,
        "error": stage.error,
        "artifacts": dict(stage.artifacts),
        "duration_s": stage.duration_s,
        "launch_timings": [timing_to_list(t) for t in stage.launch_timings],
    }


def stage_from_dict(data: dict[str, Any]) -> StageResult:
    score = data.get("score")
    return StageResult(
        stage=str(data["stage"]),
        passed=bool(data["passed"]),
        score=None if score is None else float(score),
        metrics={str(k): float(v) for k, v in data.get("metrics", {}).items()},
        heldout={str(k): float(v) for k, v in data.get("heldout", {}).items()},
        features={str(k): float(v) for k, v in data.get("features", {}).items()},
        cases=tuple(case_from_list(c) for c in data.get("cases", [])),
        feedback=str(data.get("feedback", "")),
        error=data.get("error"),
        artifacts={str(k): str(v) for k, v in data.get("artifacts", {}).items()},
        duration_s=float(data.get("duration_s", 0.0)),
        launch_timings=tuple(timing_from_list(t) for t in data.get("launch_timings", [])),
    )


def timing_to_list(timing: StoredTiming) -> list[Any]:
    """A stored timing without its provenance (the controller adds it when it writes one)."""
    key = timing.key
    return [
        key.kernel_hash,
        key.launch,
        key.case,
        timing.gpu,
        timing.harness,
        timing.t_us,
        timing.cublas_us,
        timing.samples,
    ]


def timing_from_list(data: list[Any]) -> StoredTiming:
    return StoredTiming(
        key=LaunchKey(kernel_hash=str(data[0]), launch=str(data[1]), case=str(data[2])),
        gpu=str(data[3]),
        harness=str(data[4]),
        t_us=float(data[5]),
        cublas_us=float(data[6]),
        samples=int(data[7]),
    )


def evaluation_to_dict(evaluation: Evaluation) -> dict[str, Any]:
    return {
        "program_id": evaluation.program_id,
        "job_id": evaluation.job_id,
        "status": evaluation.status.value,
        "stages": [stage_to_dict(s) for s in evaluation.stages],
        "worker": evaluation.worker,
        "duration_s": evaluation.duration_s,
        "handoff": evaluation.handoff,
        "remeasure": evaluation.remeasure,
    }


def evaluation_from_dict(data: dict[str, Any]) -> Evaluation:
    return Evaluation(
        program_id=str(data["program_id"]),
        job_id=str(data["job_id"]),
        status=ProgramStatus(data["status"]),
        stages=tuple(stage_from_dict(s) for s in data["stages"]),
        worker=str(data.get("worker", "")),
        duration_s=float(data.get("duration_s", 0.0)),
        handoff=None if data.get("handoff") is None else str(data["handoff"]),
        remeasure=int(data.get("remeasure", 0)),
    )


def remeasure_to_dict(remeasure: Remeasure) -> dict[str, Any]:
    spread = remeasure.spread
    return {
        "verdict": remeasure.verdict.value,
        "picked": remeasure.picked,
        "samples": list(remeasure.samples),
        "confirmed": remeasure.confirmed,
        "note": remeasure.note,
        "spread": None
        if spread is None
        else [spread.geomean, spread.gsd, spread.low, spread.median, spread.high, spread.count],
        "spread_over": None if remeasure.spread_over is None else remeasure.spread_over.value,
    }


def remeasure_from_dict(data: dict[str, Any]) -> Remeasure:
    spread, over, confirmed = data.get("spread"), data.get("spread_over"), data.get("confirmed")
    return Remeasure(
        verdict=Verdict(data["verdict"]),
        picked=float(data["picked"]),
        samples=tuple(float(value) for value in data.get("samples", [])),
        confirmed=None if confirmed is None else float(confirmed),
        note=None if data.get("note") is None else str(data["note"]),
        spread=None if spread is None else _spread_from_list(spread),
        spread_over=None if over is None else SpreadOver(over),
    )


def _spread_from_list(data: list[Any]) -> Spread:
    geomean, gsd, low, median, high = (float(value) for value in data[:5])
    return Spread(geomean=geomean, gsd=gsd, low=low, median=median, high=high, count=int(data[5]))
