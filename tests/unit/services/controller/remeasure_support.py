"""A tiny problem whose score depends on the evaluation's seed, a scripted proposer, and a run
helper: what the re-measure tests of the controller share."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.config import RunConfig
from codevolve.core.job import Job, JobState
from codevolve.core.problem import Baseline, Candidate, FeatureSpec, Mutation, Stage, Threshold
from codevolve.core.program import StageResult
from codevolve.core.prompt import Prompt, Proposal
from codevolve.core.task import Task
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import run_worker
from codevolve.services.controller.loop import Controller, Progress

LUCKY_SEED = 1234  # the evaluation seed lucky programs are first evaluated with
LUCKY_DRAW = int(np.random.default_rng(LUCKY_SEED).integers(2**31))  # the stage's input then

INITIAL = "def score(draw):\n    return 1.0\n"
STEADY = "def score(draw):\n    return 2.0\n"
# Tuned to the one input it was first evaluated on: 9.0 there, 0.5 anywhere else.
LUCKY_LOW = f"def score(draw):\n    return 9.0 if draw == {LUCKY_DRAW} else 0.5\n"
# Tuned the same way, and broken on every other input.
LUCKY_FAILING = (
    f"def score(draw):\n    if draw == {LUCKY_DRAW}:\n        return 9.0\n"
    "    raise ValueError('an input it was not tuned on')\n"
)


class SeededStage:
    """Draws one input from the evaluation's generator; the candidate's answer is its score."""

    name = "score"
    threshold: Threshold | None = None

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        draw = int(rng.integers(2**31))
        reply = candidate.call("score", [[draw]])
        value = reply.values[0] if reply.ok and reply.values else None
        if not isinstance(value, int | float):
            return StageResult(stage=self.name, passed=False, score=None, error=reply.error)
        return StageResult(stage=self.name, passed=True, score=float(value))


@dataclass(frozen=True)
class SeededProblem:
    name: str = "seeded"
    description: str = "return a score"
    initial_program: str = INITIAL
    stages: Sequence[Stage] = (SeededStage(),)
    features: Sequence[FeatureSpec] = ()

    def mutations(self) -> Sequence[Mutation]:
        return ()

    def baselines(self) -> Sequence[Baseline]:
        return ()


class ScriptedProposer:
    """Proposal ``i`` rewrites the parent into ``sources[i]``."""

    name = "scripted"
    reads_prompt_text = False
    cpu_bound = False

    def __init__(self, sources: Sequence[str]) -> None:
        self._sources = sources

    async def propose(self, prompt: Prompt, rng: np.random.Generator) -> Proposal:
        return Proposal(text=self._sources[prompt.proposal_index], proposer=self.name)


class LuckyFirstQueue(LocalQueue):
    """Evaluates a lucky program first on the input it was tuned on: the program a search that
    keeps the best of noisy evaluations ends up picking. Re-measures pass untouched."""

    def __init__(self, *, drop_remeasures_of: str | None = None, samples: int = 0) -> None:
        """``drop_remeasures_of``: never deliver the re-measure tasks of this source (they die
        with the controller); ``dropped`` is set once ``samples`` of them were sent."""
        super().__init__()
        self._drop = drop_remeasures_of
        self._samples = samples
        self.dropped = asyncio.Event()
        self._dropped = 0

    async def submit(self, task: Task) -> None:
        await self.submit_many([task])

    async def submit_many(self, tasks: Sequence[Task]) -> None:
        kept = []
        for task in tasks:
            if task.remeasure and task.source == self._drop:
                self._dropped += 1
                if self._dropped >= self._samples:
                    self.dropped.set()
            elif not task.remeasure and str(LUCKY_DRAW) in task.source:
                kept.append(dataclasses.replace(task, seed=LUCKY_SEED))
            else:
                kept.append(task)
        await super().submit_many(kept)


async def run_seeded(
    job: Job,
    sessions: async_sessionmaker[AsyncSession],
    queue: LocalQueue,
    sources: Sequence[str],
    *,
    on_progress: Callable[[Progress], None] | None = None,
    crash: asyncio.Event | None = None,
    proposer: object | None = None,
) -> tuple[JobState | None, Controller]:
    """Run the job with one worker loop; with ``crash``, cancel the run once it is set (a
    crash) and return None as its state. ``proposer`` replaces the scripted ``sources``."""
    problem = SeededProblem()
    stop = asyncio.Event()
    with SandboxPool(size=1) as pool:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(
                run_worker(
                    queue,
                    resolve_problem=lambda _name: problem,
                    pool=pool,
                    concurrency=1,
                    name="w",
                    stop=stop,
                )
            )
            controller = Controller(
                job,
                sessions=sessions,
                queue=queue,
                problem=problem,
                proposer=proposer or ScriptedProposer(sources),  # type: ignore[arg-type]
                on_progress=on_progress,
            )
            try:
                state = await _run(controller, crash)
            finally:
                stop.set()
    return state, controller


async def _run(controller: Controller, crash: asyncio.Event | None) -> JobState | None:
    async with asyncio.timeout(60):
        if crash is None:
            return await controller.run()
        run = asyncio.ensure_future(controller.run())
        crashed = asyncio.ensure_future(crash.wait())
        await asyncio.wait([run, crashed], return_when=asyncio.FIRST_COMPLETED)
        crashed.cancel()
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
    return None


def seeded_config(**overrides: object) -> RunConfig:
    values: dict[str, object] = {"problem": "seeded", "seed": 3, "max_in_flight": 1}
    return RunConfig.model_validate(values | overrides)
