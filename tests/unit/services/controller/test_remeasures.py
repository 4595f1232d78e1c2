"""The bookkeeping of re-measures: their tasks, seeds and samples, and the wire format that
carries the mark of a re-measure to a worker and back."""

from __future__ import annotations

import dataclasses

from codevolve.core.codec import (
    evaluation_from_dict,
    evaluation_to_dict,
    task_from_dict,
    task_to_dict,
)
from codevolve.core.config import RunConfig
from codevolve.core.measurement import RemeasurePolicy
from codevolve.core.program import Evaluation, Program, ProgramStatus, StageResult
from codevolve.core.task import failed_evaluation
from codevolve.services.controller.remeasures import Remeasures, remeasure_seed

CONFIG = RunConfig(problem="seeded", seed=7)
PROGRAM = Program(
    id="p1",
    job_id="j",
    source="def score(draw):\n    return 2.0\n",
    content_hash="h",
    parent_id="p0",
    island=0,
    generation=1,
    proposal_index=4,
    status=ProgramStatus.EVALUATED,
    score=2.0,
)


def _result(sample: int, score: float = 2.0) -> Evaluation:
    stage = StageResult(stage="score", passed=True, score=score)
    return Evaluation(
        program_id=PROGRAM.id,
        job_id="j",
        status=ProgramStatus.EVALUATED,
        stages=(stage,),
        remeasure=sample,
    )


def test_a_re_measure_is_samples_tasks_of_the_same_source_with_fresh_reproducible_seeds() -> None:
    remeasures = Remeasures("j", CONFIG, RemeasurePolicy(top_k=2, samples=3))
    tasks = remeasures.start(PROGRAM)
    assert [task.remeasure for task in tasks] == [1, 2, 3]
    assert {task.source for task in tasks} == {PROGRAM.source}
    assert all(task.parent_scores == {} for task in tasks)  # judged on their own
    seeds = [task.seed for task in tasks]
    assert len(set(seeds)) == 3
    assert seeds == [remeasure_seed(CONFIG.seed, PROGRAM, k) for k in (1, 2, 3)]
    other_job = [remeasure_seed(CONFIG.seed + 1, PROGRAM, k) for k in (1, 2, 3)]
    assert not set(seeds) & set(other_job)
    assert remeasures.free == 1 and remeasures.program_ids() == [PROGRAM.id]


def test_a_re_measure_is_judged_once_its_last_sample_lands() -> None:
    remeasures = Remeasures("j", CONFIG, RemeasurePolicy(samples=2))
    remeasures.start(PROGRAM)
    assert remeasures.land(_result(2, 1.5)) is None
    assert remeasures.land(_result(2, 9.9)) is None  # a duplicate delivery changes nothing
    assert [task.remeasure for task in remeasures.outstanding()] == [1]
    landed = remeasures.land(_result(1, 2.5))
    assert landed is not None
    program, samples = landed
    assert program == PROGRAM and [s.score for s in samples] == [2.5, 1.5]  # in sample order
    assert not remeasures and remeasures.land(_result(1)) is None  # late: nobody awaits it


def test_a_handed_on_sample_continues_its_own_task() -> None:
    remeasures = Remeasures("j", CONFIG, RemeasurePolicy(samples=1))
    (task,) = remeasures.start(PROGRAM)
    partial = dataclasses.replace(_result(1), handoff="gpu")
    handed = remeasures.hand_on(partial)
    assert handed is not None
    assert (handed.capability, handed.start_stage, handed.seed) == ("gpu", 1, task.seed)
    assert handed.remeasure == 1 and remeasures.outstanding() == [handed]


def test_the_mark_of_a_re_measure_crosses_the_wire_and_survives_a_dead_letter() -> None:
    remeasures = Remeasures("j", CONFIG, RemeasurePolicy(samples=2))
    task = remeasures.start(PROGRAM)[1]
    assert task_from_dict(task_to_dict(task)) == task
    evaluation = _result(2)
    assert evaluation_from_dict(evaluation_to_dict(evaluation)) == evaluation
    dead = failed_evaluation(task, "dead letter: delivered 3 times", worker="w")
    assert dead.remeasure == 2 and dead.status is ProgramStatus.FAILED
