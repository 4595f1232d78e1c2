"""A run's live counters, for progress bars and logs."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from codevolve.core.program import Evaluation, ProgramStatus
from codevolve.services.controller.launch_reuse import from_store

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Progress:
    """Live counters of a run, for progress bars and logs."""

    proposals: int = 0  # proposals recorded, this run and earlier ones
    max_proposals: int = 0
    evaluated: int = 0  # results applied in this process
    failed: int = 0
    rejected: int = 0
    apply_failed: int = 0
    duplicates: int = 0
    remeasured: int = 0  # re-measure samples applied in this process (not proposals)
    from_store: int = 0  # results whose device stages the launch store answered wholly
    best_score: float | None = None  # the job's best as confirmed on independent samples
    started: float = field(default_factory=time.monotonic)

    @property
    def evaluated_per_s(self) -> float:
        elapsed = time.monotonic() - self.started
        done = self.evaluated + self.failed + self.rejected
        return done / elapsed if elapsed > 0 else 0.0

    def count(self, evaluation: Evaluation) -> None:
        """Count an applied result by its status."""
        if evaluation.status is ProgramStatus.EVALUATED:
            self.evaluated += 1
        elif evaluation.status is ProgramStatus.REJECTED:
            self.rejected += 1
        else:
            self.failed += 1
        if from_store(evaluation):
            self.from_store += 1
        if evaluation.status is ProgramStatus.FAILED:
            log.debug("program %s failed: %s", evaluation.program_id, evaluation.error)
