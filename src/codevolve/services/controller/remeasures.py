"""The re-measures in flight: would-be bests evaluated again on fresh seeds before they are
reported (DESIGN.md section 5, the winner's curse).

A program whose score beats the job's confirmed best is a would-be best. The controller asks the
database for the best of them (evaluated, never re-measured: committed state, so a resumed job
finds the ones a crash interrupted) and starts their re-measures here, at most
``RemeasurePolicy.top_k`` at once (:data:`AT_ONCE`): each is ``RemeasurePolicy.samples``
ordinary tasks of the same source through the same cascade, each with a fresh seed, marked
``Task.remeasure`` so that its result never touches the program's own row. When a program's
samples are all in, the controller judges them (:func:`codevolve.core.measurement.judge`) and
records the verdict; only a confirmed figure can move the job's best.

Bookkeeping only: no I/O here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from codevolve.core.config import RunConfig
from codevolve.core.measurement import RemeasurePolicy
from codevolve.core.program import Evaluation, JobId, Program, ProgramId
from codevolve.core.task import Task

# Re-measures running at once. One: a confirmed figure that lands first often makes the next
# would-be bests moot (they no longer beat it). On gemm-tiling, 1000 proposals, seed 0, three at
# once re-measured 60 and 62 programs in two runs, one at a time 50 and 38, for the same best.
AT_ONCE = 1


def remeasure_seed(job_seed: int, program: Program, sample: int) -> int:
    """The seed of a program's ``sample``-th re-measure (1-based): independent of the seed it
    was first evaluated with (a different entropy), and the same in every run of the job's
    seed. The proposal index stands for the program: its id is random."""
    rng = np.random.default_rng([job_seed, program.proposal_index + 1, sample])
    return int(rng.integers(2**31))


@dataclass(slots=True)
class _Remeasuring:
    program: Program
    tasks: dict[int, Task]  # sample -> its task as last sent (a hand-off continues it)
    samples: dict[int, Evaluation] = field(default_factory=dict)  # sample -> its result


class Remeasures:
    """The re-measures a controller has started and not judged yet."""

    def __init__(self, job_id: JobId, config: RunConfig, policy: RemeasurePolicy) -> None:
        self._job_id = job_id
        self._config = config
        self.policy = policy
        self._running: dict[ProgramId, _Remeasuring] = {}

    def __bool__(self) -> bool:
        return bool(self._running)

    @property
    def free(self) -> int:
        """How many more re-measures may start now."""
        return max(self.policy.top_k - len(self._running), 0)

    def program_ids(self) -> list[ProgramId]:
        return list(self._running)

    def start(self, program: Program) -> list[Task]:
        """The tasks of a program's re-measure, now counted as running."""
        tasks = {
            sample: self._task(program, sample) for sample in range(1, self.policy.samples + 1)
        }
        self._running[program.id] = _Remeasuring(program=program, tasks=tasks)
        return list(tasks.values())

    def drop(self, program_id: ProgramId) -> None:
        """Forget a re-measure whose tasks were not sent (the database still lists it)."""
        self._running.pop(program_id, None)

    def outstanding(self) -> list[Task]:
        """The tasks whose results have not landed, to send again when the queue lost them."""
        return [
            task
            for running in self._running.values()
            for sample, task in running.tasks.items()
            if sample not in running.samples
        ]

    def hand_on(self, evaluation: Evaluation) -> Task | None:
        """The rest of a sample's cascade for a worker with the capability it needs, or None
        when the sample is not awaited (a late or duplicate result)."""
        running = self._running.get(evaluation.program_id)
        task = None if running is None else running.tasks.get(evaluation.remeasure)
        if running is None or task is None or evaluation.handoff is None:
            return None
        task = dataclasses.replace(
            task,
            capability=evaluation.handoff,
            start_stage=len(evaluation.stages),
            prior_stages=evaluation.stages,
        )
        running.tasks[evaluation.remeasure] = task
        return task

    def land(self, evaluation: Evaluation) -> tuple[Program, list[Evaluation]] | None:
        """Record a sample's result; when it was the program's last, the program and its
        samples in sample order (and the re-measure is no longer running). A result nobody
        awaits (a duplicate delivery, a re-measure from before a resume) changes nothing."""
        running = self._running.get(evaluation.program_id)
        if running is None or evaluation.remeasure not in running.tasks:
            return None
        running.samples.setdefault(evaluation.remeasure, evaluation)
        if len(running.samples) < len(running.tasks):
            return None
        del self._running[evaluation.program_id]
        return running.program, [running.samples[k] for k in sorted(running.samples)]

    def _task(self, program: Program, sample: int) -> Task:
        config = self._config
        return Task(
            program_id=program.id,
            job_id=self._job_id,
            problem=config.problem,
            source=program.source,
            seed=remeasure_seed(config.seed, program, sample),
            # No parent-relative thresholds: the program already passed them; a sample is judged
            # on its own (an absolute threshold still rejects it).
            parent_scores={},
            limits=config.sandbox,
            remeasure=sample,
            initial=program.parent_id is None,
        )
