"""Jobs: one evolution run of one problem with one config."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from codevolve.core.config import RunConfig
from codevolve.core.program import JobId, ProgramId


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True, slots=True)
class Job:
    id: JobId
    config: RunConfig
    state: JobState
    created_at: datetime
    owner: str = ""
    proposals: int = 0  # proposals made so far (the counter budgets read)
    wall_s: float = 0.0  # seconds spent running, summed over resumes
    best_program_id: ProgramId | None = None
    best_score: float | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ProgramCounts:
    pending: int = 0
    evaluated: int = 0
    failed: int = 0
    rejected: int = 0

    @property
    def total(self) -> int:
        return self.pending + self.evaluated + self.failed + self.rejected
