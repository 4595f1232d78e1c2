"""Composition of the embedded default: one process, SQLite (or any URL), in-process workers.

This is the only place (with the CLI) that creates the engine, the queue, the sandbox pool and the
proposer for a run; everything is closed when the run ends, also on errors and cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.config import RunConfig
from codevolve.core.device import GPU, needed_capabilities
from codevolve.core.errors import ConfigError
from codevolve.core.job import Job, JobState
from codevolve.core.problem import Problem
from codevolve.evaluator_workers.gpu.device_process import DeviceProcess
from codevolve.evaluator_workers.gpu.pinning import embedded_gpus, open_devices, worker_slots
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import run_worker
from codevolve.problems import registry
from codevolve.program_db import repository
from codevolve.program_db.engine import session_factory
from codevolve.proposers.base import Proposer
from codevolve.proposers.simulated import SimulatedProposer
from codevolve.services.controller.loop import Controller, Progress
from codevolve.services.database import open_database
from codevolve.services.read_models.report import build_report
from codevolve.services.runtime.problems import cached_problem, prepare_problem


@dataclass(frozen=True, slots=True)
class RunResult:
    job_id: str
    state: JobState
    report: dict[str, Any]  # empty when the run was interrupted
    interrupted: str | None = None  # the signal that stopped the run (SIGINT, SIGTERM)
    error: str | None = None  # why the job failed (state failed), as the job records it


GC_THRESHOLD = 20_000  # allocations between collections of the youngest generation (default 700)


def tune_gc() -> None:
    """Garbage collection for a long-lived controller process: what is alive at start (modules,
    problem tables) moves out of the collector's sight, and the youngest generation is collected
    every 20,000 allocations instead of 700. A busy controller allocates a few hundred objects per
    program, nearly all freed by reference counting; collecting them costs it several percent of
    its CPU at the default."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 50, 100)


def make_proposer(config: RunConfig, problem: Problem) -> Proposer:
    """The simulated proposer; an LLM proposer holds an HTTP client: use :func:`open_proposer`."""
    if config.proposer.kind != "simulated":
        raise ConfigError(f"proposer {config.proposer.kind!r} needs open_proposer()")
    return SimulatedProposer(problem.mutations(), domain_weight=config.proposer.domain_weight)


@contextlib.asynccontextmanager
async def open_proposer(config: RunConfig, problem: Problem) -> AsyncIterator[Proposer]:
    """The run's proposer, with whatever it holds (an HTTP client) closed when the run ends."""
    if config.proposer.kind == "llm":
        from codevolve.services.runtime.llm import open_llm_proposer

        async with open_llm_proposer(config) as llm:
            yield llm
    else:
        yield make_proposer(config, problem)


async def run_embedded(
    *,
    db_url: str,
    config: RunConfig | None = None,
    resume: str | None = None,
    workers: int = 2,
    gpus: str | None = None,
    devices: Sequence[DeviceProcess] | None = None,
    proposal_processes: int = 0,
    on_start: Callable[[Job], None] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    handle_signals: bool = False,
) -> RunResult:
    """Create (``config``) or resume (``resume`` = job id) a job and run it to its end here.

    Everything the run needs is checked before the job is written. With ``handle_signals`` (a
    command line's process), SIGINT or SIGTERM stops the run: the job is marked paused, with the
    signal named in its error, and the result says ``interrupted``. A run cancelled otherwise
    marks its job paused too and lets the cancellation go on."""
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    async with open_database(db_url, write=True) as engine:
        sessions = session_factory(engine)
        async with sessions.begin() as session:
            job, problem, gpu_ids = await _create_or_load(
                session, config=config, resume=resume, gpus=gpus
            )
        if on_start is not None:
            on_start(job)
        interruption = _Interruption()
        try:
            with interruption.handled(enabled=handle_signals):
                state = await _run_job(
                    job,
                    problem,
                    sessions=sessions,
                    workers=workers,
                    devices=(
                        list(devices)
                        if devices is not None
                        else open_devices(gpu_ids, registry.device_jobs().values())
                    ),
                    owned=devices is None,
                    proposal_processes=proposal_processes,
                    on_progress=on_progress,
                )
        except asyncio.CancelledError:
            await _mark_paused(sessions, job.id, interruption.note())
            if interruption.signal is None:
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()  # the cancellation was ours, asked for by the signal
            return RunResult(
                job_id=job.id, state=JobState.PAUSED, report={}, interrupted=interruption.signal
            )
        async with sessions.begin() as session:
            report = await build_report(session, job.id, problem)
            finished = await repository.get_job(session, job.id)
        error = None if finished is None or state is not JobState.FAILED else finished.error
        return RunResult(job_id=job.id, state=state, report=report, error=error)


async def _run_job(
    job: Job,
    problem: Problem,
    *,
    sessions: async_sessionmaker[AsyncSession],
    workers: int,
    devices: list[DeviceProcess],
    owned: bool,
    proposal_processes: int,
    on_progress: Callable[[Progress], None] | None,
) -> JobState:
    """The controller and the in-process workers of one job, until the controller ends."""
    queue = LocalQueue()
    stop = asyncio.Event()
    # One worker per GPU when the problem has GPU stages and a GPU is here (or --gpus); devices
    # this run opened (``owned``) are closed at its end.
    with SandboxPool(size=workers) as pool, contextlib.ExitStack() as held:
        for opened in devices if owned else ():
            held.enter_context(opened)
        async with asyncio.TaskGroup() as tg:
            for name, loops, device in worker_slots(workers, devices):
                tg.create_task(
                    run_worker(
                        queue,
                        resolve_problem=cached_problem,
                        pool=pool,
                        concurrency=loops,
                        name=name,
                        stop=stop,
                        device=device,
                    )
                )
            try:
                async with open_proposer(job.config, problem) as proposer:
                    controller = Controller(
                        job,
                        sessions=sessions,
                        queue=queue,
                        problem=problem,
                        proposer=proposer,
                        on_progress=on_progress,
                        proposal_processes=proposal_processes,
                    )
                    return await controller.run()
            finally:
                stop.set()


async def _create_or_load(
    session: AsyncSession, *, config: RunConfig | None, resume: str | None, gpus: str | None
) -> tuple[Job, Problem, list[str]]:
    """The job (created or read back), its problem and the GPUs it runs on; a new job is written
    last, after its problem and GPUs are known to be usable."""
    loaded: Job | None = None
    if resume is None:
        if config is None:
            raise ConfigError("either a config or a job id to resume is needed")
        name = config.problem
    else:
        loaded = await repository.get_job(session, resume)
        if loaded is None:
            raise ConfigError(f"--resume {resume}: no such job in this database")
        if loaded.state is JobState.CANCELLED:
            raise ConfigError(f"--resume {resume}: the job was cancelled; start a new one")
        name = loaded.config.problem
    await prepare_problem(session, name)  # fail early; a bundle is stored (or read back)
    problem = cached_problem(name)
    gpu_ids = problem_gpus(problem, gpus)
    if loaded is None:
        assert config is not None
        return await repository.create_job(session, config), problem, gpu_ids
    return loaded, problem, gpu_ids


def problem_gpus(problem: Problem, gpus: str | None) -> list[str]:
    """The GPUs (or ``cpu``) that judge ``problem`` here, as ``--gpus`` asks; ConfigError when
    its cascade needs a GPU and none is given or visible."""
    gpu_ids = embedded_gpus(problem.stages, gpus)
    if not gpu_ids and GPU in needed_capabilities(problem.stages):
        hint = " (--gpus cpu judges a KernelBench problem on the CPU)" if gpus is None else ""
        label = getattr(problem, "title", problem.name)  # a KernelBench file's name, not its id
        raise ConfigError(
            f"{label}: its cascade needs a GPU and this run has none "
            f"({'--gpus ' + gpus if gpus is not None else 'no GPU visible'}){hint}"
        )
    return gpu_ids


async def _mark_paused(sessions: async_sessionmaker[AsyncSession], job_id: str, note: str) -> None:
    """A job whose run stopped early is paused, not left running (``--resume`` continues it)."""
    async with sessions.begin() as session:
        job = await repository.get_job(session, job_id)
        if job is not None and job.state in (JobState.RUNNING, JobState.QUEUED):
            await repository.set_job_state(session, job_id, JobState.PAUSED, error=note)


# The same signal again within this many seconds is the same request, not a second one: GNU
# timeout sends its signal to the command and then to the command's process group, so the
# command receives it twice at once.
REPEAT_WINDOW_S = 1.0


class _Interruption:
    """SIGINT or SIGTERM, handled once: the run's task is cancelled and the signal remembered.

    A second signal while the run winds down raises KeyboardInterrupt, as Python's default does,
    unless it repeats the first within :data:`REPEAT_WINDOW_S` (also after the run: then the
    process's earlier handler takes any later one)."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.at = 0.0

    def note(self) -> str:
        return f"interrupted ({self.signal})" if self.signal else "interrupted"

    @contextlib.contextmanager
    def handled(self, *, enabled: bool) -> Iterator[None]:
        task = asyncio.current_task()
        # Only the main thread may install signal handlers (and only it receives signals): a run
        # started from another thread (an embedding program, a test) keeps Python's defaults.
        in_main_thread = threading.current_thread() is threading.main_thread()
        if not enabled or task is None or not in_main_thread:
            yield
            return
        loop = asyncio.get_running_loop()
        numbers = (signal.SIGINT, signal.SIGTERM)

        def on_signal(number: signal.Signals) -> None:
            if self.signal is not None:
                if number.name == self.signal and time.monotonic() - self.at < REPEAT_WINDOW_S:
                    return
                raise KeyboardInterrupt
            self.signal, self.at = number.name, time.monotonic()
            task.cancel()

        for number in numbers:
            loop.add_signal_handler(number, on_signal, number)
        try:
            yield
        finally:
            for number in numbers:
                loop.remove_signal_handler(number)
            if self.signal is not None:  # a repeat may still be on its way once the run is over
                first = signal.Signals[self.signal]
                previous = signal.getsignal(first)

                def after_run(number: int, _frame: object) -> None:
                    if time.monotonic() - self.at < REPEAT_WINDOW_S:
                        return
                    signal.signal(number, previous)
                    signal.raise_signal(number)

                signal.signal(first, after_run)
