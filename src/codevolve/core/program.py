"""Programs, their evaluations and the results of each cascade stage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import TypeAlias

from codevolve.core.launch_store import StoredTiming
from codevolve.core.remeasure import Remeasure

ProgramId: TypeAlias = str  # uuid4 hex
JobId: TypeAlias = str  # uuid4 hex
Metrics: TypeAlias = Mapping[str, float]  # higher is better unless a metric's name says otherwise
ScoresPerStage: TypeAlias = Mapping[str, float]  # stage name -> that stage's primary score
CellKey: TypeAlias = tuple[int, ...]  # one bin index per feature descriptor
IslandId: TypeAlias = int

EMPTY: Mapping[str, float] = MappingProxyType({})


class ProgramStatus(StrEnum):
    """Lifecycle of a program. Only ``pending`` may change, once."""

    PENDING = "pending"  # inserted, its task queued or running
    EVALUATED = "evaluated"  # passed every stage; eligible for the archive
    FAILED = "failed"  # an error: crash, timeout, invalid output, static check, dead letter
    REJECTED = "rejected"  # ran fine but fell below a cascade threshold


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One test case of a stage (for gemm: one shape), ``cost`` lower is better (e.g. microseconds).

    The controller keeps the best cost seen per case key; prompts show the cases where a parent is
    furthest from that best, which is the feedback directed mutations act on.
    """

    key: str
    cost: float
    detail: str = ""


@dataclass(frozen=True, slots=True)
class StageResult:
    """What one cascade stage concluded about a program.

    ``score`` is the stage's primary score (higher is better) and what thresholds compare.
    ``heldout`` metrics are reported but never used for selection and never shown to a proposer.
    """

    stage: str
    passed: bool
    score: float | None
    metrics: Metrics = field(default_factory=dict)
    heldout: Metrics = field(default_factory=dict)
    features: Mapping[str, float] = field(default_factory=dict)
    cases: tuple[CaseResult, ...] = ()
    feedback: str = ""
    error: str | None = None
    artifacts: Mapping[str, str] = field(default_factory=dict)
    duration_s: float = 0.0  # seconds
    # The judge's fresh timings per launch, for the launch store (the controller writes them
    # with the program's ids; they are not kept with the program).
    launch_timings: tuple[StoredTiming, ...] = ()


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The result of running one program through the cascade, as a worker reports it."""

    program_id: ProgramId
    job_id: JobId
    status: ProgramStatus  # evaluated, failed or rejected; never pending
    stages: tuple[StageResult, ...]
    worker: str = ""
    duration_s: float = 0.0  # seconds, wall, the whole cascade
    # Set when every stage so far passed and the next one needs a capability this worker lacks
    # ("gpu"): the evaluation is unfinished, and the controller re-enqueues it for that capability.
    handoff: str | None = None
    remeasure: int = 0  # the task's: 0 for the program's own evaluation, k for a re-measure sample

    @property
    def score(self) -> float | None:
        """The program's score: the last stage's score when every stage passed, else None."""
        if self.status is not ProgramStatus.EVALUATED or not self.stages:
            return None
        return self.stages[-1].score

    @property
    def metrics(self) -> dict[str, float]:
        merged: dict[str, float] = {}
        for stage in self.stages:
            merged.update(stage.metrics)
        return merged

    @property
    def heldout(self) -> dict[str, float]:
        merged: dict[str, float] = {}
        for stage in self.stages:
            merged.update(stage.heldout)
        return merged

    @property
    def features(self) -> dict[str, float]:
        merged: dict[str, float] = {}
        for stage in self.stages:
            merged.update(stage.features)
        return merged

    @property
    def cases(self) -> tuple[CaseResult, ...]:
        return tuple(case for stage in self.stages for case in stage.cases)

    @property
    def stage_scores(self) -> dict[str, float]:
        return {s.stage: s.score for s in self.stages if s.score is not None}

    @property
    def error(self) -> str | None:
        return next((s.error for s in self.stages if s.error), None)

    @property
    def feedback(self) -> str:
        return "\n".join(s.feedback for s in self.stages if s.feedback)


@dataclass(frozen=True, slots=True)
class Program:
    """One candidate program as the program database holds it."""

    id: ProgramId
    job_id: JobId
    source: str
    content_hash: str
    parent_id: ProgramId | None
    island: IslandId
    generation: int
    proposal_index: int  # the job's proposal counter when this program was made
    status: ProgramStatus
    epoch: int = 0  # the island's epoch when the parent was sampled; stale after a reset
    attempts: int = 0  # times a task for it was enqueued (1 unless a crash or lease re-queued it)
    diff: str = ""  # the SEARCH/REPLACE text (or full rewrite) that made it from its parent
    proposer: str = ""  # e.g. "simulated:add_rule" or "llm:gpt-x"
    score: float | None = None
    stage_scores: ScoresPerStage = field(default_factory=dict)
    metrics: Metrics = field(default_factory=dict)
    heldout: Metrics = field(default_factory=dict)
    features: Mapping[str, float] = field(default_factory=dict)
    cell: CellKey | None = None
    cases: tuple[CaseResult, ...] = ()
    feedback: str = ""
    error: str | None = None
    artifacts: Mapping[str, str] = field(default_factory=dict)
    created_at: datetime | None = None
    evaluated_at: datetime | None = None
    # Set once the program was re-measured as a would-be best of its job (None: never was);
    # the job's best is the program with the best confirmed figure.
    remeasure: Remeasure | None = None


@dataclass(frozen=True, slots=True)
class ProgramHeader:
    """A program as a listing shows it: who it is, where it sits and its score, without its
    source and results (a page of programs reads only these columns)."""

    id: ProgramId
    job_id: JobId
    status: ProgramStatus
    score: float | None
    island: IslandId
    generation: int
    proposal_index: int
    parent_id: ProgramId | None
    proposer: str
    cell: CellKey | None
    created_at: datetime | None
