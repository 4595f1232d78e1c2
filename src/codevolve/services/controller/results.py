"""Result application: a batch of evaluations into the database and the archive.

One transaction per batch: one guarded ``pending -> evaluated`` UPDATE for all of them (a result
delivered twice is applied once), then the archive statements only for the programs that change
it, decided by the mirror and written through the guarded upserts. The best cost seen per case
is mirrored too: read per proposal (the prompts show it), written (improvements only) per result.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from codevolve.core.problem import FeatureSpec
from codevolve.core.program import CellKey, Evaluation, Program, ProgramId, ProgramStatus
from codevolve.core.prompt import BestCase
from codevolve.evaluator_workers.queue import TaskQueue
from codevolve.program_db import archive
from codevolve.program_db.archive import WRITTEN
from codevolve.program_db.job_store import JobStore, JobTransaction
from codevolve.program_db.programs import evaluated_program
from codevolve.services.controller.launch_reuse import record_fresh_timings
from codevolve.services.controller.parents import ParentCache

log = logging.getLogger(__name__)

RESULT_POLL_S = 0.2  # seconds; how long one read waits for a first result
RESULT_BATCH = 256  # results applied per transaction, at most


class ResultReads:
    """Reads batches of results from the queue; a read that waits may be stopped from outside
    (the run is over and nothing is awaited), rather than let it wait out its poll."""

    def __init__(self, queue: TaskQueue) -> None:
        self._queue = queue
        self._read: asyncio.Future[list[Evaluation]] | None = None  # the one waiting

    async def next(self) -> list[Evaluation]:
        """The next batch of results, or [] when :meth:`stop` ended the read."""
        self._read = asyncio.ensure_future(self._queue.next_results(RESULT_POLL_S, RESULT_BATCH))
        current = asyncio.current_task()
        try:
            evaluations = await self._read
        except asyncio.CancelledError:
            if current is not None and current.cancelling():
                raise  # the reader itself is cancelled
            return []  # stopped
        finally:
            self._read = None
        if current is not None and current.cancelling():
            # The reader was cancelled while the read was finishing, and the read returned
            # anyway (a queue client may end a cancelled call with an answer): asyncio then
            # loses the request, so it is honoured here, or the run would never stop.
            raise asyncio.CancelledError
        return evaluations

    def stop(self) -> None:
        """End the read that waits, if any. A result it had read anyway is for no program in
        flight (the caller awaits none), so applying it would change nothing."""
        if self._read:
            self._read.cancel()


@dataclass(frozen=True, slots=True)
class Applied:
    """A result that changed its program: the program as it was sent, the evaluation, its cell
    (None unless evaluated)."""

    program: Program
    evaluation: Evaluation
    cell: CellKey | None


class ResultApplier:
    """Applies final results (not hand-offs, not re-measure samples) of one job."""

    def __init__(
        self, store: JobStore, parents: ParentCache, features: Sequence[FeatureSpec]
    ) -> None:
        self._store = store
        self._parents = parents
        self._features = features  # the problem's descriptors: they make a result's cell
        self.best_cases: dict[str, BestCase] = {}  # per case key; loaded at the run's start

    async def apply(
        self, finals: Sequence[Evaluation], sent: Mapping[ProgramId, Program]
    ) -> list[Applied]:
        """Apply ``finals``; the results that changed their program, once each. ``sent``: the
        programs in flight as sent; any other program a result names is read from the database."""
        results = [(evaluation, self.cell(evaluation)) for evaluation in finals]
        try:
            async with self._store.transaction() as unit:
                applied_ids = await unit.apply_evaluations(results)
                known = dict(sent)
                missing = [pid for pid in applied_ids if pid not in known]
                known.update({p.id: p for p in await unit.programs(missing)})
                applied: dict[ProgramId, Applied] = {}
                for evaluation, cell in results:
                    program = known.get(evaluation.program_id)
                    if evaluation.program_id in applied_ids and program is not None:
                        applied.setdefault(program.id, Applied(program, evaluation, cell))
                await self._archive(unit, list(applied.values()))
                await record_fresh_timings(unit, [a.evaluation for a in applied.values()])
        except BaseException:
            self._parents.forget()
            raise
        return list(applied.values())

    def cell(self, evaluation: Evaluation) -> CellKey | None:
        if evaluation.status is not ProgramStatus.EVALUATED:
            return None
        return archive.cell_key(evaluation.features, self._features)

    async def _archive(self, unit: JobTransaction, applied: Sequence[Applied]) -> None:
        """Best cases, elites and the job's best for a batch of applied results."""
        mirror = self._parents.mirror or await self._parents.load(unit)
        self._parents.mirror = mirror
        improved: list[BestCase] = []
        elites: dict[ProgramId, Program] = {}  # as evaluated, for the prompts that show them
        for result in applied:
            program, evaluation, cell = result.program, result.evaluation, result.cell
            improved += self._improved_cases(result)
            score = evaluation.score
            if evaluation.status is not ProgramStatus.EVALUATED or score is None or cell is None:
                continue
            if program.parent_id is None:  # the seed enters every island at its current epoch
                targets = list(mirror.epochs.items())
            else:
                targets = [(program.island, program.epoch)]
            for island, epoch in targets:
                decided = mirror.offer(
                    island=island, cell=cell, program_id=program.id, score=score, epoch=epoch
                )
                if decided not in WRITTEN:
                    continue
                written = await unit.add_elite(
                    island=island, cell=cell, program_id=program.id, score=score, epoch=epoch
                )
                if written is not decided:  # someone else wrote: read the archive again
                    log.warning("job %s: archive changed outside; reloading", self._store.job_id)
                    self._parents.forget()
                elites[program.id] = evaluated_program(program, evaluation, cell)
        if improved:
            await unit.record_best_cases(improved)
        if elites:
            self._parents.cache(list(elites.values()))
            self._parents.changed.set()

    def _improved_cases(self, result: Applied) -> list[BestCase]:
        """The cases where this result's cost beats the best seen, now held as the best."""
        improved = []
        for case in result.evaluation.cases:
            held = self.best_cases.get(case.key)
            if held is None or case.cost < held.cost:
                best_case = BestCase(
                    key=case.key, cost=case.cost, detail=case.detail, program_id=result.program.id
                )
                self.best_cases[case.key] = best_case
                improved.append(best_case)
        return improved
