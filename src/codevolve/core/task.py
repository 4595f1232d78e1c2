"""The unit of work a worker takes: run one program through its problem's cascade."""

from __future__ import annotations

from dataclasses import dataclass, field

from codevolve.core.config import SandboxLimits
from codevolve.core.program import JobId, ProgramId, ScoresPerStage


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
