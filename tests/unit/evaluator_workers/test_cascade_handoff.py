"""One evaluation crossing worker pools: a CPU worker hands a program on at its GPU stage, the
controller enqueues the rest for a GPU worker, which finishes it with the stages already run."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from codevolve.core.codec import (
    evaluation_from_dict,
    evaluation_to_dict,
    task_from_dict,
    task_to_dict,
)
from codevolve.core.config import RunConfig
from codevolve.core.device import GPU, Device, DeviceReply
from codevolve.core.problem import (
    Baseline,
    Candidate,
    FeatureSpec,
    JSONValue,
    Mutation,
    SandboxReply,
    Stage,
    Threshold,
)
from codevolve.core.program import Evaluation, ProgramStatus, StageResult
from codevolve.core.task import Task
from codevolve.evaluator_workers.cascade import run_cascade
from codevolve.evaluator_workers.gpu.device_process import DeviceProcess
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import _evaluate, run_worker
from tests.unit.evaluator_workers.gpu import fake_device_jobs


class FakeCandidate:
    """Runs trusted test sources in this process (the stages under test never see the sandbox)."""

    def __init__(self, source: str) -> None:
        self._source = source

    @property
    def source(self) -> str:
        return self._source

    def call(self, entry: str, args: Sequence[Sequence[JSONValue]]) -> SandboxReply:
        namespace: dict[str, object] = {}
        exec(compile(self._source, "<candidate>", "exec"), namespace)  # trusted test sources
        function = namespace[entry]
        values = tuple(_plain(function(*a)) for a in args)  # type: ignore[operator]
        return SandboxReply(values=values)

    def call_harness(
        self, harness: str, entry: str, args: Sequence[Sequence[JSONValue]]
    ) -> SandboxReply:
        raise NotImplementedError


def _plain(value: object) -> JSONValue:
    return list(value) if isinstance(value, tuple) else value  # type: ignore[return-value]


@dataclass(frozen=True)
class CpuStage:
    name: str = "cpu"
    threshold: Threshold | None = None

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        return StageResult(stage=self.name, passed=True, score=2.0)


@dataclass(frozen=True)
class GpuStage:
    name: str = "gpu"
    threshold: Threshold | None = None
    capability: str = GPU

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        return StageResult(stage=self.name, passed=False, score=None, error="no device")

    def run_on(self, candidate: Candidate, device: Device, rng: np.random.Generator) -> StageResult:
        reply = device.run("info", None, timeout_s=60)
        return StageResult(
            stage=self.name,
            passed=reply.ok,
            score=3.0,
            error=None if reply.ok else reply.error,
            artifacts={"device_index": str(device.index)},
        )


class TwoStageProblem:
    name = "two-stage"
    description = "a CPU stage, then a GPU stage"
    initial_program = "def f():\n    return 1\n"
    stages: Sequence[Stage] = (CpuStage(), GpuStage())
    features: Sequence[FeatureSpec] = ()

    def mutations(self) -> Sequence[Mutation]:
        return ()

    def baselines(self) -> Sequence[Baseline]:
        return ()


class InProcessDevice:
    index = 2
    capability = GPU

    def run(self, job: str, payload: JSONValue, *, timeout_s: float) -> DeviceReply:
        return DeviceReply(value={"name": "Fake GPU"})


TASK = Task(
    program_id="p", job_id="j", problem="two-stage", source="def f():\n    return 1\n", seed=1
)


@pytest.fixture(scope="module")
def pool() -> SandboxPool:
    with SandboxPool(size=1) as sandbox:
        yield sandbox  # type: ignore[misc]


def test_a_cpu_worker_hands_the_program_on_at_the_gpu_stage(pool: SandboxPool) -> None:
    cpu = run_cascade(TwoStageProblem(), TASK, pool, worker="cpu-0")
    assert cpu.status is ProgramStatus.EVALUATED and cpu.handoff == GPU
    assert [s.stage for s in cpu.stages] == ["cpu"]

    rest = dataclasses.replace(TASK, capability=GPU, start_stage=1, prior_stages=cpu.stages)
    gpu = run_cascade(TwoStageProblem(), rest, pool, worker="gpu-0", device=InProcessDevice())
    assert gpu.handoff is None and gpu.status is ProgramStatus.EVALUATED
    assert [s.stage for s in gpu.stages] == ["cpu", "gpu"]
    assert gpu.score == 3.0 and gpu.stages[1].artifacts["device_index"] == "2"


def test_a_worker_with_a_device_runs_the_whole_cascade_itself(pool: SandboxPool) -> None:
    both = run_cascade(TwoStageProblem(), TASK, pool, worker="w", device=InProcessDevice())
    assert both.handoff is None and [s.stage for s in both.stages] == ["cpu", "gpu"]


def test_a_task_for_a_capability_the_worker_lacks_fails_with_the_reason(pool: SandboxPool) -> None:
    task = dataclasses.replace(TASK, capability=GPU, start_stage=1)
    evaluation = _evaluate(
        task, resolve_problem=lambda _name: TwoStageProblem(), pool=pool, worker="cpu-0"
    )
    assert evaluation.status is ProgramStatus.FAILED
    assert "lacks capability 'gpu'" in (evaluation.error or "")


def test_continuations_and_hand_offs_survive_the_wire_format() -> None:
    stage = StageResult(stage="cpu", passed=True, score=2.0, metrics={"m": 1.0})
    task = dataclasses.replace(TASK, capability=GPU, start_stage=1, prior_stages=(stage,))
    assert task_from_dict(task_to_dict(task)) == task
    evaluation = Evaluation(
        program_id="p", job_id="j", status=ProgramStatus.EVALUATED, stages=(stage,), handoff=GPU
    )
    assert evaluation_from_dict(evaluation_to_dict(evaluation)) == evaluation


class RoutingQueue:
    """Both queue sides, one task queue per capability (what Redis streams do distributed)."""

    def __init__(self) -> None:
        self.tasks = {"cpu": asyncio.Queue[Task](), GPU: asyncio.Queue[Task]()}
        self.results: asyncio.Queue[Evaluation] = asyncio.Queue()

    async def submit(self, task: Task) -> None:
        self.tasks[task.capability].put_nowait(task)

    async def submit_many(self, tasks: Sequence[Task]) -> None:
        for task in tasks:
            await self.submit(task)

    async def next_results(self, timeout_s: float, limit: int) -> list[Evaluation]:
        try:
            async with asyncio.timeout(timeout_s):
                results = [await self.results.get()]
        except TimeoutError:
            return []
        while len(results) < limit and not self.results.empty():
            results.append(self.results.get_nowait())
        return results

    def side(self, capability: str) -> _Side:
        return _Side(self, capability)


@dataclass
class _Side:
    queue: RoutingQueue
    capability: str

    @property
    def claimed(self) -> int:
        return 0

    async def claim(self, timeout_s: float) -> Task | None:
        try:
            async with asyncio.timeout(timeout_s):
                return await self.queue.tasks[self.capability].get()
        except TimeoutError:
            return None

    async def complete(self, task: Task, evaluation: Evaluation) -> None:
        self.queue.results.put_nowait(evaluation)


@pytest.mark.slow
async def test_gemm_tiling_gpu_evolves_across_a_cpu_pool_and_a_gpu_pool(tmp_path: Path) -> None:
    from codevolve.program_db import repository
    from codevolve.program_db.engine import create_engine, session_factory, upgrade
    from codevolve.services.controller.loop import Controller
    from codevolve.services.runtime.embedded import make_proposer
    from codevolve.services.runtime.problems import cached_problem

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'run.sqlite'}")
    await upgrade(engine)
    sessions = session_factory(engine)
    config = RunConfig(problem="gemm-tiling-gpu", seed=2, max_proposals=12, max_in_flight=4)
    async with sessions.begin() as session:
        job = await repository.create_job(session, config)
    problem = cached_problem("gemm-tiling-gpu")
    queue, stop = RoutingQueue(), asyncio.Event()
    device = DeviceProcess(None, index=1, jobs=fake_device_jobs.TARGETS)
    try:
        with SandboxPool(size=2) as pool, device:
            async with asyncio.TaskGroup() as tg:
                common = {"resolve_problem": cached_problem, "pool": pool, "stop": stop}
                tg.create_task(run_worker(queue.side("cpu"), concurrency=1, name="cpu", **common))
                tg.create_task(
                    run_worker(queue.side(GPU), concurrency=1, name="gpu", device=device, **common)
                )
                controller = Controller(
                    job,
                    sessions=sessions,
                    queue=queue,
                    problem=problem,
                    proposer=make_proposer(config, problem),
                )
                try:
                    state = await controller.run()
                finally:
                    stop.set()
        async with sessions.begin() as session:
            best = await repository.best_program(session, job.id)
            stored = await repository.get_job(session, job.id)
            confirmed = await repository.confirmed_best(session, job.id)
            seed_id = await repository.find_program_by_hash(
                session, job.id, _hash(problem.initial_program)
            )
            assert seed_id is not None
            seed = await repository.get_program(session, seed_id)
    finally:
        await engine.dispose()
    assert state.value == "done"
    assert seed is not None and seed.status is ProgramStatus.EVALUATED
    assert list(seed.stage_scores) == ["static", "probe", "train", "gpu"]
    assert seed.artifacts.get("device_index") == "1"  # the GPU part ran on the GPU worker
    assert best is not None and best.score is not None and "gpu" in best.stage_scores
    # The job's best was re-measured through both pools (its samples handed on at the GPU stage).
    assert confirmed is not None and confirmed.remeasure is not None
    assert stored is not None and stored.best_program_id == confirmed.id


def _hash(source: str) -> str:
    from codevolve.services.controller.loop import content_hash

    return content_hash(source)
