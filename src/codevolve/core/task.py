"""The unit of work a worker takes: run one program through its problem's cascade."""

from __future__ import annotations

from dataclasses import dataclass, field

from codevolve.core.config import SandboxLimits
from codevolve.core.launch_store import StoredTiming
from codevolve.core.program import (
    Evaluation,
    JobId,
    ProgramId,
    ProgramStatus,
    ScoresPerStage,
    StageResult,
)


@dataclass(frozen=True, slots=True)
class Task:
    program_id: ProgramId
    job_id: JobId
    problem: str
    source: str
    seed: int  # fresh inputs per evaluation derive from it
    parent_scores: ScoresPerStage = field(default_factory=dict)  # for parent-relative thresholds
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    attempt: int = 1  # delivery count, for dead-lettering
    # Where the task may run and where its cascade resumes: a worker that meets a stage needing a
    # capability it lacks hands the program on (Evaluation.handoff), and the controller enqueues
    # the rest as a task of that capability, carrying the stages already run.
    capability: str = "cpu"  # "cpu" or "gpu": the queue a distributed deployment routes it to
    start_stage: int = 0  # index of the first stage to run
    prior_stages: tuple[StageResult, ...] = ()  # results of stages 0 .. start_stage-1
    # 0: the program's own evaluation. k >= 1: the k-th independent sample of a re-measure (a
    # winner confirmed on fresh inputs before it is reported), which never changes the program's
    # own status or figures.
    remeasure: int = 0
    # The job's initial program: a threshold only stops its cascade, never rejects it (a job
    # needs its seed in the archive), whatever the stage's Threshold.rejects says.
    initial: bool = False
    # Timings the launch store holds for the launches this program takes (any GPU model and
    # harness: the stage keeps those of its device); never set on a re-measure, which times
    # afresh (docs/launch-store.md).
    stored_timings: tuple[StoredTiming, ...] = ()


def failed_evaluation(task: Task, error: str, *, worker: str) -> Evaluation:
    """The evaluation of a task no stage could finish: the stages handed over, then the error."""
    stage = StageResult(stage="", passed=False, score=None, error=error)
    return Evaluation(
        program_id=task.program_id,
        job_id=task.job_id,
        status=ProgramStatus.FAILED,
        stages=(*task.prior_stages, stage),
        worker=worker,
        remeasure=task.remeasure,
    )
