"""Benchmark: how fast the machinery around evaluation is, embedded and distributed.

Prints, in one run:

1. programs evaluated per second end to end (propose, apply, insert, enqueue, evaluate, apply the
   result, archive) with an *instant* evaluator, embedded (SQLite, in-process queue) and
   distributed (Postgres, Redis Streams, a worker process);
2. scaling of a 50 ms sleep-bound evaluator at 1, 4, 16 and 64 worker slots, distributed:
   efficiency = programs/s / (slots / 0.05 s); the slots are spread over worker processes of at
   most 16 each (64 slots: 4 processes), as a deployment runs several `codevolve worker`s; each
   run proposes 8 s of the evaluator's work (64 slots: 10240 proposals), so its fixed start and
   end weigh alike at every slot count;
2b. the same evaluator with no controller: tasks queued in Redis beforehand, drained by the same
   worker processes (the fleet's own scaling);
3. p50/p99 latency of sampling a parent and inspirations with 10^4, 10^5 and 10^6 programs of one
   job in Postgres (bulk-loaded with COPY), an island of 100 cells (sampling reads the island's
   elites, so its cost follows the cells, not the population; gemm-tiling has 64 cells): the
   stateless SQL sampler (one session per draw), and the controller's own, which draws from its
   in-memory copy of the archive, whose elite programs it loaded with it.

The evaluator here is trusted bench code that never runs the candidate: what is measured is the
controller, the database, the queue and the worker loop, not a problem. The machine's load average
is printed with each figure.

    python bench/throughput.py [--pg postgresql://postgres@127.0.0.1:5432/test]
        [--redis redis://127.0.0.1:6379/0] [--sizes 10000,100000,1000000] [--quick]
        [--parts 1,2,3] [--slots 1,4,16,64] [--proposal-processes 0,4] [--profile FOLDER]

``--proposal-processes`` runs figures 1 and 2 once per count of the controller's proposal
processes (``codevolve serve --proposal-processes``), one after the other in the same run.

``--profile FOLDER`` writes a cProfile pstats file (CPU time, not wall time) of each controller
run (``controller.run()`` only, not the workers or the setup) to FOLDER, numbered in run order and
named by its slot count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import hashlib
import itertools
import json
import multiprocessing
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from sqlalchemy.engine import make_url

from codevolve.core.config import RunConfig
from codevolve.core.job import Job
from codevolve.core.problem import Baseline, Candidate, FeatureSpec, Mutation, Stage, Threshold
from codevolve.core.program import StageResult
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.evaluator_workers.redis_queue import RESULTS_PER_READ, QueueTuning, RedisTaskQueue
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.evaluator_workers.worker import run_worker
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, sqlite_url, upgrade
from codevolve.services.controller.loop import Controller
from codevolve.services.runtime.embedded import make_proposer, tune_gc
from codevolve.services.runtime.workers import WorkerOptions, run_worker_process

INITIAL = """\
# EVOLVE-BLOCK-START
def f(x):
    a = 1.0
    b = 2.0
    c = 3.0
    d = 4.0
    if x > 0.5:
        return a * x + b - d
    return c - x * d
# EVOLVE-BLOCK-END
"""
SLEEP_S = 0.05  # seconds per evaluation of the sleep-bound evaluator
SCALING_ROUNDS = 8  # figure 2: each run proposes this many seconds of the evaluator's work
PROPOSALS = 3000  # figure 1: proposals per run
SLOTS_PER_PROCESS = 16  # worker slots per worker process (each process is one event loop)


TRACE_FOLDER: Path | None = None  # --trace: where each run's step table goes
TRACE_S = 0.1  # seconds per step of a trace
TIMELINE_S = 0.5  # seconds per step of a run's timeline (the slowest, median, fastest step)
_TRACE_RUNS = itertools.count(1)
PROFILE_FOLDER: Path | None = None  # --profile: where each controller run's pstats file goes
PROPOSAL_PROCESSES = 0  # the controller's proposal processes in the run going on
_PROFILE_RUNS = itertools.count(1)  # numbers the files: two runs may have the same slot count


@dataclass(frozen=True, slots=True)
class Scratch:
    """A Postgres database of this bench's own (db_batches.py borrows it too)."""

    name: str  # the database's name
    url: str  # its SQLAlchemy URL (postgresql+asyncpg)
    admin: asyncpg.Connection  # a connection to the server's own database, e.g. for statistics


@contextlib.asynccontextmanager
async def scratch_database(pg: str) -> AsyncIterator[Scratch]:
    """A new database on the server of ``pg`` (a libpq or SQLAlchemy URL of any database there),
    dropped on exit."""
    admin_url = make_url(pg).set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"cv_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        url = make_url(pg).set(drivername="postgresql+asyncpg", database=name)
        try:
            yield Scratch(name=name, url=url.render_as_string(hide_password=False), admin=admin)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def _write_profile(profiler: cProfile.Profile, config: RunConfig) -> None:
    assert PROFILE_FOLDER is not None
    PROFILE_FOLDER.mkdir(parents=True, exist_ok=True)
    name = f"controller-{next(_PROFILE_RUNS):02d}-{config.max_in_flight // 2}slots.pstats"
    profiler.dump_stats(PROFILE_FOLDER / name)
    print(f"    (profile of the controller: {PROFILE_FOLDER / name})")


@dataclass(frozen=True, slots=True)
class _Stage:
    """Scores a program from its source hash, after ``sleep_s`` (0: instantly)."""

    sleep_s: float
    name: str = "score"
    threshold: Threshold | None = None

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        began = time.time()
        if self.sleep_s:
            time.sleep(self.sleep_s)
        digest = hashlib.sha256(candidate.source.encode()).digest()
        score = int.from_bytes(digest[:4], "big") / 2**32
        feature = int.from_bytes(digest[4:8], "big") / 2**32
        clock = {"began": began, "ended": time.time()}  # for the run's timeline
        return StageResult(
            stage=self.name, passed=True, score=score, features={"h": feature}, metrics=clock
        )


@dataclass(frozen=True, slots=True)
class BenchProblem:
    """A problem whose evaluation costs nothing (or a fixed sleep): the machinery is measured."""

    sleep_s: float = 0.0
    name: str = "bench"
    description: str = "bench: any change is fine"
    initial_program: str = INITIAL

    @property
    def stages(self) -> Sequence[Stage]:
        return (_Stage(self.sleep_s),)

    @property
    def features(self) -> Sequence[FeatureSpec]:
        return (FeatureSpec(name="h", low=0.0, high=1.0, bins=50),)

    def mutations(self) -> Sequence[Mutation]:
        return ()

    def baselines(self) -> Sequence[Baseline]:
        return ()


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} on {os.cpu_count()} cores"


def _config(proposals: int, in_flight: int) -> RunConfig:
    return RunConfig(
        problem="bench",
        max_proposals=proposals,
        max_in_flight=in_flight,
        migration_interval=0,
        proposer={"domain_weight": 0.0},
    )


async def _run_job(
    db_url: str, problem: BenchProblem, config: RunConfig, queue_for: object
) -> tuple[int, float]:
    """Run one job to its end; returns (programs evaluated, wall seconds)."""
    engine = create_engine(db_url)
    try:
        await upgrade(engine)
        sessions = session_factory(engine)
        async with sessions.begin() as session:
            job = await repository.create_job(session, config)
        queue = await queue_for(job.id)  # type: ignore[operator]
        controller = Controller(
            job,
            sessions=sessions,
            queue=queue,
            problem=problem,
            proposer=make_proposer(config, problem),
            proposal_processes=PROPOSAL_PROCESSES,
        )
        profiler = cProfile.Profile(time.process_time) if PROFILE_FOLDER else None
        started, cpu = time.perf_counter(), time.process_time()
        if profiler is not None:
            profiler.enable()
        await controller.run()
        if profiler is not None:
            profiler.disable()
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu
        async with sessions() as session:
            counts = await repository.program_counts(session, job.id)
            timeline = await _timeline(session, job.id)
        done = counts.evaluated + counts.rejected + counts.failed
        print(
            f"    (this process: {cpu / max(done, 1) * 1000:.2f} ms CPU per program, busy "
            f"{cpu / wall:.0%} of {wall:.1f} s; {timeline})"
        )
        if profiler is not None:
            _write_profile(profiler, config)
        return done, wall
    finally:
        await engine.dispose()


async def _timeline(session: Any, job_id: str) -> str:
    """How steady the run was: programs evaluated per second in each half second of it (the
    slowest, the median, the fastest; the first and last half seconds left out), and the time
    from a child's insert to its result's. With ``--trace``, a table of the run's steps goes to
    the trace folder."""
    from sqlalchemy import select

    from codevolve.program_db.models import ProgramRow

    rows = (
        await session.execute(
            select(ProgramRow.created_at, ProgramRow.evaluated_at, ProgramRow.metrics).where(
                ProgramRow.job_id == job_id, ProgramRow.evaluated_at.is_not(None)
            )
        )
    ).all()
    if len(rows) < 10:
        return "too few programs for a timeline"
    # Seconds since the epoch: inserted, evaluation began, ended (the workers' clock, this
    # machine's), applied.
    times = np.array(
        [
            (
                created.timestamp(),
                metrics.get("began", np.nan),
                metrics.get("ended", np.nan),
                evaluated.timestamp(),
            )
            for created, evaluated, metrics in rows
        ]
    )
    times -= times[:, 0].min()
    buckets = np.bincount((times[:, 3] / TIMELINE_S).astype(int))[1:-1] / TIMELINE_S
    p50, p90, p99 = np.percentile((times[:, 3] - times[:, 0]) * 1000, [50, 90, 99])
    rates = (
        f"per {TIMELINE_S} s: {buckets.min():.0f} / {np.median(buckets):.0f} / "
        f"{buckets.max():.0f} programs/s"
        if len(buckets)
        else "shorter than a timeline step"
    )
    if TRACE_FOLDER is not None:
        _write_trace(times)
    return f"{rates}; insert to result p50 {p50:.0f}, p90 {p90:.0f}, p99 {p99:.0f} ms"


def _write_trace(times: np.ndarray) -> None:
    """Per step of ``TRACE_S``: programs inserted, begun, ended and applied per second, and on
    average how many were queued (inserted, not begun), on a worker, and back (ended, not
    applied)."""
    assert TRACE_FOLDER is not None
    TRACE_FOLDER.mkdir(parents=True, exist_ok=True)
    path = TRACE_FOLDER / f"trace-{next(_TRACE_RUNS):02d}.txt"
    end = float(np.nanmax(times))
    lines = ["t_s inserted/s begun/s ended/s applied/s queued on_worker back"]
    for start in np.arange(0.0, end, TRACE_S):
        moments = np.linspace(start, start + TRACE_S, 5)[:-1]
        held = [
            np.mean([((times[:, a] <= m) & ~(times[:, b] <= m)).sum() for m in moments])
            for a, b in ((0, 1), (1, 2), (2, 3))
        ]
        made = [
            ((times[:, c] >= start) & (times[:, c] < start + TRACE_S)).sum() / TRACE_S
            for c in range(4)
        ]
        lines.append(f"{start:6.2f} " + " ".join(f"{v:6.0f}" for v in made + held))
    path.write_text("\n".join(lines) + "\n")
    print(f"    (trace: {path})")


async def embedded(problem: BenchProblem, *, proposals: int, slots: int) -> tuple[int, float]:
    with tempfile.TemporaryDirectory() as folder:
        queue = LocalQueue()
        stop = asyncio.Event()
        with SandboxPool(size=1) as pool:

            async def local(_job: str) -> LocalQueue:
                return queue

            async with asyncio.TaskGroup() as tg:
                tg.create_task(
                    run_worker(
                        queue,
                        resolve_problem=lambda _n: problem,
                        pool=pool,
                        concurrency=slots,
                        name="bench",
                        stop=stop,
                    )
                )
                try:
                    url = sqlite_url(Path(folder) / "bench.sqlite")
                    return await _run_job(url, problem, _config(proposals, 2 * slots), local)
                finally:
                    stop.set()


def _worker_main(redis_url: str, prefix: str, slots: int, sleep_s: float, name: str) -> None:
    problem = BenchProblem(sleep_s=sleep_s)
    options = WorkerOptions(key_prefix=prefix, tuning=QueueTuning(), heartbeat_s=1.0)
    run_worker_process(
        redis_url, "cpu", slots, name, options=options, resolve_problem=lambda _n: problem
    )


async def distributed(
    problem: BenchProblem,
    *,
    pg: str,
    redis_url: str,
    proposals: int,
    slots: int,
    in_flight_per_slot: int = 2,
) -> tuple[int, float]:
    async with scratch_database(pg) as scratch:
        return await _distributed(
            problem,
            scratch,
            redis_url=redis_url,
            proposals=proposals,
            slots=slots,
            in_flight_per_slot=in_flight_per_slot,
        )


async def _distributed(
    problem: BenchProblem,
    scratch: Scratch,
    *,
    redis_url: str,
    proposals: int,
    slots: int,
    in_flight_per_slot: int,
) -> tuple[int, float]:
    from redis.asyncio import Redis

    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(
            target=_worker_main,
            args=(redis_url, prefix, share, problem.sleep_s, f"bench-worker-{index}"),
            daemon=True,
        )
        for index, share in enumerate(fleet(slots))
    ]
    for worker in workers:
        worker.start()
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:

        async def remote(job: str) -> RedisTaskQueue:
            queue = RedisTaskQueue(redis, job, keys=RedisKeys(prefix))
            await queue.start()
            return queue

        before = await _server_counts(scratch.admin, scratch.name, redis)
        done, wall = await _run_job(
            scratch.url,
            problem,
            _config(proposals, in_flight_per_slot * slots),
            remote,
        )
        await asyncio.sleep(1.0)  # Postgres publishes a backend's statistics within a second
        after = await _server_counts(scratch.admin, scratch.name, redis)
        spent = {name: (after[name] - before.get(name, 0)) / max(done, 1) for name in after}
        busiest = sorted((name for name in spent if spent[name] >= 0.01), key=lambda n: -spent[n])
        print("    (per program: " + ", ".join(f"{spent[n]:.2f} {n}" for n in busiest) + ")")
        return done, wall
    finally:
        for worker in workers:
            worker.terminate()
            worker.join(30)
        keys = [key async for key in redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


async def _server_counts(
    connection: asyncpg.Connection, database: str, redis: Any
) -> dict[str, int]:
    """Postgres commits in ``database`` and Redis commands by name (the whole server's: the
    controller's and the workers'), as counted so far."""
    commits = await connection.fetchval(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", database
    )
    stats = await redis.info("commandstats")
    counts = {"pg commits": int(commits or 0)}
    for name, entry in stats.items():
        counts[f"redis {name.removeprefix('cmdstat_')}"] = int(entry["calls"])
    return counts


# ------------------------------------------------------------------------------------- sampling


async def sampling(pg: str, sizes: Sequence[int], *, draws: int) -> None:
    async with scratch_database(pg) as scratch:
        await _sampling(scratch, sizes, draws=draws)


async def _sampling(scratch: Scratch, sizes: Sequence[int], *, draws: int) -> None:
    engine = create_engine(scratch.url)
    try:
        await upgrade(engine)
        sessions = session_factory(engine)
        async with sessions.begin() as session:
            job = await repository.create_job(session, _config(1, 1).model_copy())
        plain = make_url(scratch.url).set(drivername="postgresql")  # asyncpg's own connection
        bulk = await asyncpg.connect(plain.render_as_string(hide_password=False))
        try:
            loaded = 0
            for size in sizes:
                loaded = await _load_programs(bulk, job.id, start=loaded, end=size)
                await bulk.execute("ANALYZE programs; ANALYZE elites")
                latencies = await _time_sampling(sessions, job.id, draws)
                p50, p99 = np.percentile(latencies, [50, 99])
                print(
                    f"  {size:>9,} programs: SQL sample p50 {p50:6.2f} ms, p99 {p99:6.2f} ms "
                    f"({draws} draws; {load()})"
                )
                loaded_s, latencies = await _time_controller_sampling(sessions, job, draws)
                p50, p99 = np.percentile(latencies, [50, 99])
                print(
                    f"  {size:>9,} programs: controller sample p50 {p50:6.3f} ms, p99 "
                    f"{p99:6.3f} ms (its archive copy and elite programs loaded in "
                    f"{loaded_s * 1000:.1f} ms; {load()})"
                )
        finally:
            await bulk.close()
    finally:
        await engine.dispose()


CELLS = 100  # elites of the island (gemm-tiling has 64 cells): the working set of sampling
BATCH = 50_000  # rows per COPY


async def _load_programs(connection: asyncpg.Connection, job: str, *, start: int, end: int) -> int:
    """Add programs ``start .. end-1`` (evaluated, scored) and keep one elite per cell."""
    rng = np.random.default_rng(start)
    columns = (
        "id", "job_id", "source", "content_hash", "island", "epoch", "generation",
        "proposal_index", "status", "attempts", "diff", "proposer", "score", "stage_scores",
        "metrics", "heldout", "features", "cell", "cases", "feedback", "artifacts", "created_at",
    )  # fmt: skip
    now = datetime.now(UTC)
    for first in range(start, end, BATCH):
        last = min(end, first + BATCH)
        scores = rng.random(last - first)
        records = [
            (
                f"{index:032x}", job, INITIAL, f"{index:064x}", 0, 0, 1, index, "evaluated", 1, "",
                "bench", float(score), json.dumps({"score": float(score)}), "{}", "{}", "{}",
                str(index % CELLS), "[]", "", "{}", now,
            )
            for index, score in zip(range(first, last), scores, strict=True)
        ]  # fmt: skip
        await connection.copy_records_to_table("programs", records=records, columns=columns)
    await connection.execute(
        """
        INSERT INTO elites (job_id, island, cell, program_id, score, epoch, improvements)
        SELECT DISTINCT ON (cell) job_id, 0, cell, id, score, 0, 0
        FROM programs WHERE job_id = $1 ORDER BY cell, score DESC
        ON CONFLICT (job_id, island, cell) DO UPDATE
        SET program_id = EXCLUDED.program_id, score = EXCLUDED.score
        WHERE elites.score < EXCLUDED.score
        """,
        job,
    )
    return end


async def _time_controller_sampling(
    sessions: Any, job: Job, draws: int
) -> tuple[float, list[float]]:
    """What a controller does per proposal: draw from its in-memory copy of the archive, whose
    elite programs it loaded with it (one query at start, timed apart)."""
    problem = BenchProblem()
    config = job.config
    controller = Controller(
        job,
        sessions=sessions,
        queue=LocalQueue(),
        problem=problem,
        proposer=make_proposer(config, problem),
    )
    started = time.perf_counter()
    await controller.sample(0, np.random.default_rng(0))  # loads the copy of the archive
    loaded_s = time.perf_counter() - started
    rng = np.random.default_rng(1)
    latencies = []
    for _ in range(draws):
        started = time.perf_counter()
        sample = await controller.sample(0, rng)
        latencies.append((time.perf_counter() - started) * 1000)
        assert sample is not None
    return loaded_s, latencies


async def _time_sampling(sessions: object, job: str, draws: int) -> list[float]:
    rng = np.random.default_rng(0)
    latencies = []
    for _ in range(draws):
        started = time.perf_counter()
        async with sessions() as session:  # type: ignore[operator]
            sample = await repository.sample(
                session, job, 0, rng, exploit_ratio=0.7, temperature=4.0, top=2, diverse=1
            )
        latencies.append((time.perf_counter() - started) * 1000)
        assert sample is not None
    return latencies


# ----------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument(
        "--proposals",
        type=int,
        help=f"per run of figure 1 (default {PROPOSALS}); caps figure 2's runs, which otherwise "
        f"propose {SCALING_ROUNDS} s of the evaluator's work at every slot count",
    )
    parser.add_argument("--quick", action="store_true", help="small runs, to check the bench")
    parser.add_argument("--parts", default="1,2,3", help="which figures to measure (1, 2, 3)")
    parser.add_argument("--workers-only", action="store_true", help="only figure 2b")
    parser.add_argument(
        "--profile", type=Path, help="write a pstats file of each controller run to this folder"
    )
    parser.add_argument("--slots", default="1,4,16,64", help="slot counts of figures 2 and 2b")
    parser.add_argument(
        "--proposal-processes",
        default="0",
        help="figures 1 and 2 with each of these counts of proposal processes, e.g. 0,4",
    )
    parser.add_argument(
        "--in-flight-per-slot",
        default="2",
        help="figure 2: proposals in flight per worker slot (RunConfig.max_in_flight), e.g. 2,4",
    )
    parser.add_argument("--trace", type=Path, help="write a table of each run's steps here")
    args = parser.parse_args()
    global PROFILE_FOLDER, TRACE_FOLDER
    PROFILE_FOLDER = args.profile
    TRACE_FOLDER = args.trace
    tune_gc()  # as `codevolve serve` does
    proposals = 300 if args.quick else args.proposals
    sizes = [int(size) for size in args.sizes.split(",")]

    parts = {int(part) for part in args.parts.split(",")}
    if args.workers_only:
        worker_scaling(args)
        return
    if 1 in parts:
        throughput(args, proposals or PROPOSALS)
    if 2 in parts:
        scaling(args, proposals)
        worker_scaling(args)
    if 3 in parts:
        print("3. parent + inspirations sampling latency, postgres")
        asyncio.run(sampling(args.pg, sizes, draws=200 if args.quick else 1000))


def throughput(args: argparse.Namespace, proposals: int) -> None:
    instant = BenchProblem()
    print("1. programs/s end to end, instant evaluator (16 slots, 32 in flight)")
    for processes in _counts(args.proposal_processes):
        for mode in ("embedded", "postgres+redis"):
            if mode == "embedded":
                run = embedded(instant, proposals=proposals, slots=16)
            else:
                run = distributed(
                    instant, pg=args.pg, redis_url=args.redis, proposals=proposals, slots=16
                )
            done, wall = _run_with(processes, run)
            print(
                f"  {mode:>15}, {processes} proposal processes: {done / wall:7.1f} programs/s "
                f"({done} in {wall:.1f} s; {load()})"
            )


def scaling(args: argparse.Namespace, proposals: int | None) -> None:
    """Every slot count proposes the same seconds of work, so a run's fixed start (the seed's
    evaluation, filling the slots) and end (the last results) weigh alike at each."""
    print(f"2. scaling, {SLEEP_S * 1000:.0f} ms sleep-bound evaluator, postgres+redis")
    for slots in _counts(args.slots):
        runs = int(slots / SLEEP_S * (2 if args.quick else SCALING_ROUNDS))
        runs = max(40, min(proposals, runs) if proposals else runs)
        for processes, per_slot in itertools.product(
            _counts(args.proposal_processes), _counts(args.in_flight_per_slot)
        ):
            run = distributed(
                BenchProblem(sleep_s=SLEEP_S),
                pg=args.pg,
                redis_url=args.redis,
                proposals=runs,
                slots=slots,
                in_flight_per_slot=per_slot,
            )
            done, wall = _run_with(processes, run)
            rate = done / wall
            print(
                f"  {slots:>3} slots ({describe(slots)}), {processes} proposal processes, "
                f"{per_slot * slots} in flight: {rate:7.1f} programs/s, efficiency "
                f"{rate * SLEEP_S / slots:.2f} ({done} in {wall:.1f} s; {load()})"
            )


def _run_with(processes: int, run: Coroutine[Any, Any, tuple[int, float]]) -> tuple[int, float]:
    global PROPOSAL_PROCESSES
    PROPOSAL_PROCESSES = processes
    return asyncio.run(run)


def _counts(text: str) -> list[int]:
    return [int(count) for count in text.split(",")]


def worker_scaling(args: argparse.Namespace) -> None:
    print(f"2b. the same, queue and workers only: {SLEEP_S * 1000:.0f} ms tasks pre-fed to Redis")
    for slots in _counts(args.slots):
        count = max(40, int(slots / SLEEP_S * (1 if args.quick else 4)))
        rate = asyncio.run(drain(args.redis, slots=slots, count=count))
        print(
            f"  {slots:>3} slots ({describe(slots)}): {rate:7.1f} tasks/s, efficiency "
            f"{rate * SLEEP_S / slots:.2f} ({count} tasks; {load()})"
        )


def fleet(slots: int) -> list[int]:
    """Slots per worker process: at most ``SLOTS_PER_PROCESS`` each, as a deployment would run
    ``codevolve worker --concurrency 16`` several times on a machine."""
    processes = -(-slots // SLOTS_PER_PROCESS)
    return [slots // processes + (i < slots % processes) for i in range(processes)]


def describe(slots: int) -> str:
    shares = fleet(slots)
    return f"{len(shares)} worker process{'es' if len(shares) > 1 else ''} x {shares[0]}"


async def drain(redis_url: str, *, slots: int, count: int) -> float:
    """Tasks per second that worker processes with ``slots`` slots in all return (no
    controller)."""
    from redis.asyncio import Redis

    from codevolve.core.task import Task
    from codevolve.evaluator_workers.heartbeat import list_workers

    keys = RedisKeys(f"bench-{uuid.uuid4().hex[:8]}")
    redis = Redis.from_url(redis_url, decode_responses=True)
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(
            target=_worker_main,
            args=(redis_url, keys.prefix, share, SLEEP_S, f"bench-worker-{index}"),
            daemon=True,
        )
        for index, share in enumerate(fleet(slots))
    ]
    try:
        queue = RedisTaskQueue(redis, "drain", keys=keys)
        await queue.start()
        tasks = [
            Task(program_id=str(index), job_id="drain", problem="b", source="", seed=index)
            for index in range(count)
        ]
        for worker in workers:
            worker.start()
        for _ in range(60000):  # up to 10 minutes for the workers to start and announce themselves
            if len(await list_workers(redis, keys)) == len(workers):
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.0)  # their loops are all waiting on the stream now
        started = time.perf_counter()
        await queue.submit_many(tasks)  # one MULTI: every task is there at once
        returned = 0
        while returned < count:
            returned += len(await queue.next_results(1.0, RESULTS_PER_READ))
        return count / (time.perf_counter() - started)
    finally:
        for worker in workers:
            if worker.pid is not None:
                worker.terminate()
                worker.join(30)
        names = [key async for key in redis.scan_iter(match=f"{keys.prefix}:*")]
        if names:
            await redis.delete(*names)
        await redis.aclose()


if __name__ == "__main__":
    main()
