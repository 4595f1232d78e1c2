"""The job's best, confirmed before it is reported (DESIGN.md section 5, the winner's curse).

A program that beats the confirmed best is re-measured on fresh seeds (the bookkeeping is
:class:`~.remeasures.Remeasures`); when its samples are all in, they are judged
(:func:`codevolve.core.measurement.judge`) against the initial program's costs, the verdict is
recorded, and only a confirmed figure can make the program the job's best. The archive and the
prompts go on using the scores programs were picked on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from codevolve.core.measurement import RemeasurePolicy, Verdict, judge
from codevolve.core.program import Evaluation, ProgramStatus
from codevolve.core.task import Task
from codevolve.evaluator_workers.queue import TaskQueue
from codevolve.program_db.job_store import JobStore
from codevolve.services.controller.remeasures import Remeasures

log = logging.getLogger(__name__)


class Tally(Protocol):
    """Where the confirmed best and the samples applied are shown (the run's progress)."""

    best_score: float | None
    remeasured: int


class BestConfirmation:
    """Starts re-measures of would-be bests, judges their samples, moves the job's best."""

    def __init__(
        self,
        store: JobStore,
        queue: TaskQueue,
        remeasures: Remeasures,
        *,
        tally: Tally,
        initial_hash: str,
    ) -> None:
        self._store = store
        self._queue = queue
        self._remeasures = remeasures
        self._tally = tally
        self._initial_hash = initial_hash
        self._baseline_cases: dict[str, float] | None = None  # the initial program's, per case

    def __bool__(self) -> bool:
        """Re-measures are running."""
        return bool(self._remeasures)

    @property
    def policy(self) -> RemeasurePolicy:
        return self._remeasures.policy

    def beats_best(self, score: float | None) -> bool:
        best = self._tally.best_score
        return score is not None and (best is None or score > best)

    def outstanding(self) -> list[Task]:
        """The sample tasks whose results have not landed."""
        return self._remeasures.outstanding()

    async def start_more(self) -> None:
        """Start the re-measures of the best would-be bests (programs never re-measured that
        beat the confirmed best), while fewer than the policy's ``top_k`` run."""
        free = self._remeasures.free
        if free == 0:
            return
        async with self._store.transaction() as unit:
            candidates = await unit.remeasure_candidates(
                above=self._tally.best_score, exclude=self._remeasures.program_ids(), limit=free
            )
        tasks = [task for program in candidates for task in self._remeasures.start(program)]
        try:
            await self._queue.submit_many(tasks)
        except BaseException:  # not sent: the next call finds them in the database again
            for program in candidates:
                self._remeasures.drop(program.id)
            raise

    async def hand_on(self, evaluation: Evaluation) -> None:
        """Queue the rest of a sample's cascade, if the sample is still awaited."""
        handed = self._remeasures.hand_on(evaluation)
        if handed is not None:
            await self._queue.submit(handed)

    async def apply_samples(self, samples: Sequence[Evaluation]) -> bool:
        """Record re-measure samples; judge each program whose samples are all in, and move the
        job's best to it if its confirmed figure is the best. True when a program was judged
        (a re-measure slot came free)."""
        self._tally.remeasured += len(samples)
        landed = [done for sample in samples if (done := self._remeasures.land(sample))]
        for program, results in landed:
            picked = program.score if program.score is not None else 0.0
            verdict = judge(
                picked, results, baseline_cases=await self._baseline(), policy=self.policy
            )
            confirmed = verdict.confirmed if verdict.verdict is Verdict.CONFIRMED else None
            best = confirmed is not None and self.beats_best(confirmed)
            # held-out figures that only a confirming sample measured (a problem whose held-out
            # cases cost too much to time on every evaluation times them on a re-measure's
            # first sample alone) become the program's report, where its own evaluation has none
            measured = next((dict(r.heldout) for r in results if r.heldout), {})
            heldout = measured if measured and not program.heldout else None
            async with self._store.transaction() as unit:
                recorded = await unit.record_remeasure(program.id, verdict, heldout=heldout)
                if recorded and best and confirmed is not None:
                    await unit.set_best(program.id, confirmed)
            if recorded and best:
                self._tally.best_score = confirmed
            if verdict.note:
                log.info("job %s program %s: %s", self._store.job_id, program.id, verdict.note)
        return bool(landed)

    async def _baseline(self) -> dict[str, float]:
        """The initial program's cost per case: what per-case speedups are measured against."""
        if self._baseline_cases is None:
            async with self._store.transaction() as unit:
                found = await unit.find_by_hash(self._initial_hash)
                initial = None if found is None else await unit.program(found)
            if initial is None or initial.status is not ProgramStatus.EVALUATED:
                return {}
            self._baseline_cases = {case.key: case.cost for case in initial.cases}
        return self._baseline_cases
