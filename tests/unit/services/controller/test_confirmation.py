"""The job's best moves only to a confirmed figure: would-be bests re-measured and judged."""

from __future__ import annotations

import dataclasses

from codevolve.core.measurement import RemeasurePolicy, Verdict
from codevolve.core.program import Evaluation
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.services.controller.confirmation import BestConfirmation
from codevolve.services.controller.parents import ParentCache
from codevolve.services.controller.progress import Progress
from codevolve.services.controller.remeasures import Remeasures
from codevolve.services.controller.results import ResultApplier
from tests.integration.conftest import evaluation_of, new_program
from tests.unit.services.controller.conftest import Stored
from tests.unit.services.controller.test_results import FEATURES


def _confirmation(stored: Stored, queue: LocalQueue, progress: Progress) -> BestConfirmation:
    remeasures = Remeasures(stored.job.id, stored.job.config, RemeasurePolicy(top_k=1, samples=2))
    return BestConfirmation(
        stored.store, queue, remeasures, tally=progress, initial_hash="no initial program"
    )


async def _evaluated(stored: Stored, score: float) -> str:
    program = new_program(stored.job.id)
    async with stored.store.transaction() as unit:
        await unit.insert_program(program)
    writer = ResultApplier(stored.store, ParentCache(stored.store, stored.job.config), FEATURES)
    await writer.apply([evaluation_of(program, score)], {program.id: program})
    return program.id


def _sample(program_id: str, evaluation: Evaluation, sample: int) -> Evaluation:
    return dataclasses.replace(evaluation, program_id=program_id, remeasure=sample)


async def test_a_confirmed_re_measure_moves_the_best_and_a_refuted_one_does_not(
    stored: Stored,
) -> None:
    queue, progress = LocalQueue(), Progress()
    confirmation = _confirmation(stored, queue, progress)
    strong = await _evaluated(stored, 2.0)
    weak = await _evaluated(stored, 1.5)
    assert confirmation.beats_best(1.5)
    await confirmation.start_more()
    assert confirmation and queue.pending_tasks() == 2  # the best one, one at a time
    await confirmation.start_more()
    assert queue.pending_tasks() == 2  # no free slot
    fine = evaluation_of(new_program(stored.job.id), 2.0)
    assert await confirmation.apply_samples([_sample(strong, fine, 1)]) is False
    assert await confirmation.apply_samples([_sample(strong, fine, 2)]) is True
    assert progress.best_score == 2.0 and progress.remeasured == 2
    assert not confirmation.beats_best(1.5)
    await confirmation.start_more()
    assert queue.pending_tasks() == 2  # the weak one no longer beats the confirmed best
    async with stored.store.transaction() as unit:
        judged = await unit.program(strong)
        left = await unit.remeasure_candidates(above=None, exclude=[], limit=5)
        job = await unit.job()
    assert judged is not None and judged.remeasure is not None
    assert judged.remeasure.verdict is Verdict.CONFIRMED
    assert [p.id for p in left] == [weak]
    assert job is not None and job.best_program_id == strong


def _held_out(evaluation: Evaluation, heldout: dict[str, float]) -> Evaluation:
    """The evaluation with ``heldout`` as its held-out figures (empty: none measured)."""
    stages = tuple(dataclasses.replace(stage, heldout={}) for stage in evaluation.stages)
    last = dataclasses.replace(stages[-1], heldout=heldout)
    return dataclasses.replace(evaluation, stages=(*stages[:-1], last))


async def _evaluated_without_held_out(stored: Stored, score: float) -> str:
    """A program whose own evaluation measured no held-out figure (gemm-kernel-gpu's, during
    the search)."""
    program = new_program(stored.job.id)
    async with stored.store.transaction() as unit:
        await unit.insert_program(program)
    writer = ResultApplier(stored.store, ParentCache(stored.store, stored.job.config), FEATURES)
    await writer.apply([_held_out(evaluation_of(program, score), {})], {program.id: program})
    return program.id


async def test_the_held_out_figures_of_a_confirming_sample_become_the_programs_report(
    stored: Stored,
) -> None:
    queue, progress = LocalQueue(), Progress()
    confirmation = _confirmation(stored, queue, progress)
    program_id = await _evaluated_without_held_out(stored, 2.0)
    await confirmation.start_more()
    fine = evaluation_of(new_program(stored.job.id), 2.0)
    first = _held_out(_sample(program_id, fine, 1), {"score": 0.7, "test_vs_cublas": 0.8})
    second = _held_out(_sample(program_id, fine, 2), {})
    assert await confirmation.apply_samples([first, second]) is True
    async with stored.store.transaction() as unit:
        judged = await unit.program(program_id)
    assert judged is not None and judged.remeasure is not None
    assert judged.heldout == {"score": 0.7, "test_vs_cublas": 0.8}


async def test_a_programs_own_held_out_figures_stay_when_a_sample_measures_others(
    stored: Stored,
) -> None:
    queue, progress = LocalQueue(), Progress()
    confirmation = _confirmation(stored, queue, progress)
    program_id = await _evaluated(stored, 2.0)  # its own evaluation held out {"score": 1.0}
    await confirmation.start_more()
    fine = evaluation_of(new_program(stored.job.id), 2.0)
    samples = [_held_out(_sample(program_id, fine, k), {"score": 0.1}) for k in (1, 2)]
    assert await confirmation.apply_samples(samples) is True
    async with stored.store.transaction() as unit:
        judged = await unit.program(program_id)
    assert judged is not None and judged.heldout == {"score": 1.0}
