"""The server under load: 20 running jobs in one ``codevolve serve`` and 200 API requests at once.

Starts a real ``codevolve serve`` on a fresh Postgres database with Redis, and local ``codevolve
worker`` processes (docs/deploy.md, "On several machines", all on this host); submits ``--jobs``
jobs through the API with a budget they do not spend during the bench (they stay running); waits
until every one has a controller; then fires ``--requests`` concurrent API requests (a mix of
the job list, a job's detail, its programs, health and workers), ``--rounds`` times, from a lean
HTTP/1.1 client (:class:`LeanClient`; ``--client httpx`` for httpx, which costs far more CPU).

The jobs run an uploaded bundle whose evaluator takes ``--evaluator-s`` (0.5 s: jobs whose
proposals wait on evaluations, as LLM-driven jobs do), or with ``--evaluator-s 0`` the built-in
gemm-tiling, whose evaluations take milliseconds: then the controllers make proposals as fast as
the CPU allows.

Prints API latency p50/p95/p99 (ms), errors (non-2xx, and the transport error of a request
without an answer), controller restarts (the supervisor's log line for a controller that
stopped), pool timeouts (SQLAlchemy's ``QueuePool limit ... reached`` in the log), the most
connections the server held on the database at once, and the CPU each part spent per request
during the bursts (serve's API processes, the rest of serve, the workers, this bench, and a
Postgres on this host: all its processes, other databases' work included; from /proc, Linux),
then the API's CPU per request of each kind, sent one at a time. With serve's read cache on (its
default, docs/api.md "How fresh answers are") most of those are answered from it, as are most of
a burst's; ``--read-cache-s 0`` makes every request read the database. Target: p99 < 200 ms, no
restarts, no pool timeouts.

    python bench/serve_load.py [--jobs 20] [--requests 200] [--rounds 3] [--workers 2]
                               [--evaluator-s 0.5] [--api-processes N] [--read-cache-s S]
                               [--every-job] [--client lean|httpx]

Needs Postgres (``CODEVOLVE_TEST_POSTGRES``, default postgresql://postgres@127.0.0.1:5432/test)
and Redis (``CODEVOLVE_TEST_REDIS``, default redis://127.0.0.1:6379/0). The database it creates is
dropped at the end, and the Redis keys under its prefix deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx
import numpy as np
import redis as redis_sync
from sqlalchemy.engine import make_url

POSTGRES = os.environ.get("CODEVOLVE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("CODEVOLVE_TEST_REDIS", "redis://127.0.0.1:6379/0")
ADMIN_TOKEN = "bench-admin-token"  # a throwaway server's token
START_TIMEOUT_S = 60.0  # seconds for serve to answer /health
RUNNING_TIMEOUT_S = 120.0  # seconds for every job to be running
RESTART_LINE = "controller stopped"  # the supervisor's log line for a controller that raised
POOL_TIMEOUT_LINE = "QueuePool limit"  # SQLAlchemy's pool timeout message
POSTGRES_PROCESS = "postgres"  # the command name of a Postgres server's processes
SEQUENTIAL = 50  # requests sent one after the other: the cost of one request, without queueing
PER_ROUTE = 200  # requests of each kind sent one after the other, for the API's CPU per route
CONNECTIONS_SQL = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
INITIAL = "# EVOLVE-BLOCK-START\ndef solve(x):\n    return x + 1\n# EVOLVE-BLOCK-END\n"
EVALUATOR = (
    "import time\n\n\ndef evaluate(program_path):\n"
    "    time.sleep({seconds})\n    return {{'combined_score': 1.0}}\n"
)


def _bundle(seconds: float) -> dict[str, str]:
    """An OpenEvolve-layout bundle whose evaluator takes ``seconds``, base64 per file."""
    files = {
        "initial_program.py": INITIAL,
        "evaluator.py": EVALUATOR.format(seconds=seconds),
        "config.yaml": "max_iterations: 1000000\n",
    }
    return {path: base64.b64encode(data.encode()).decode() for path, data in files.items()}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "codevolve.services.cli", *args]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _with_database(url: str, database: str) -> str:
    return make_url(url).set(database=database).render_as_string(hide_password=False)


@dataclass
class Server:
    """The serve and worker processes, their logs, and the database they use."""

    database: str
    prefix: str
    logs: Path
    port: int = field(default_factory=_free_port)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODEVOLVE_")}
        return env | {"CODEVOLVE_ADMIN_TOKEN": ADMIN_TOKEN}

    def spawn(self, name: str, command: list[str]) -> None:
        with (self.logs / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=self.env()
            )
        self.processes.append(process)

    def start(self, workers: int, concurrency: int, serve_options: list[str]) -> None:
        db = _with_database(POSTGRES, self.database)
        self.spawn(
            "serve",
            [
                *_cli("--log-level", "INFO", "serve", "--db", db, "--redis", REDIS),
                *("--port", str(self.port), "--key-prefix", self.prefix, *serve_options),
            ],
        )
        for index in range(workers):
            self.spawn(
                f"worker-{index}",
                [
                    *_cli("worker", "--redis", REDIS, "--key-prefix", self.prefix),
                    *("--concurrency", str(concurrency)),
                ],
            )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def serve_log(self) -> str:
        return (self.logs / "serve.log").read_text(errors="replace")


async def _admin(sql: str) -> None:
    connection = await asyncpg.connect(POSTGRES)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def _wait_healthy(client: httpx.AsyncClient, server: Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if any(process.poll() is not None for process in server.processes):
            raise SystemExit(f"a process exited early; see {server.logs}")
        try:
            if (await client.get("/api/v1/health")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.3)
    raise SystemExit(f"serve did not answer /health in {START_TIMEOUT_S} s; see {server.logs}")


async def _submit(client: httpx.AsyncClient, args: argparse.Namespace) -> list[str]:
    created = await client.post(
        "/api/v1/tokens",
        json={"owner": "bench", "can_upload": True},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    created.raise_for_status()
    client.headers["Authorization"] = f"Bearer {created.json()['token']}"
    ids = []
    for seed in range(args.jobs):
        config = {"proposals": 10_000_000, "seed": seed, "in_flight": args.in_flight}
        if args.evaluator_s > 0:
            body = {"files": _bundle(args.evaluator_s), "config": config}
            response = await client.post("/api/v1/jobs/bundle", json=body)
        else:
            body = {"problem": "gemm-tiling", "config": config}
            response = await client.post("/api/v1/jobs", json=body)
        response.raise_for_status()
        ids.append(response.json()["id"])
    return ids


async def _wait_running(client: httpx.AsyncClient, ids: list[str]) -> None:
    deadline = time.monotonic() + RUNNING_TIMEOUT_S
    while time.monotonic() < deadline:
        listed = (await client.get("/api/v1/jobs")).json()["jobs"]
        states = {job["id"]: job["state"] for job in listed}
        if all(states.get(job_id) == "running" for job_id in ids):
            return
        await asyncio.sleep(0.5)
    raise SystemExit(f"the jobs were not all running after {RUNNING_TIMEOUT_S} s")


def _paths(
    ids: list[str], count: int, kinds: tuple[int, ...] = (0, 1, 2, 3, 4), *, every_job: bool = False
) -> list[str]:
    """``count`` request paths, a round-robin mix of the five kinds (or of ``kinds``). The job of
    request ``i`` is ``ids[i % len(ids)]``, so with 20 jobs a job's detail and its programs are
    asked of 4 of them; ``every_job`` goes round every job for each kind instead."""
    paths = []
    for index in range(count):
        job = ids[(index // len(kinds) if every_job else index) % len(ids)]
        kind = kinds[index % len(kinds)]
        paths.append(
            [
                "/api/v1/jobs",
                f"/api/v1/jobs/{job}",
                f"/api/v1/jobs/{job}/programs",
                "/api/v1/health",
                "/api/v1/workers",
            ][kind]
        )
    return paths


@dataclass(frozen=True)
class Answer:
    path: str
    ms: float  # from sending the request to reading the whole answer
    status: int  # 0: no answer
    error: str = ""  # for no answer: the transport error's type

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class LeanClient:
    """GET requests over HTTP/1.1 keep-alive connections, one request at a time on each, as
    many connections as requests in flight: the bench's load generator. It shares the machine
    with the server, so it must cost little: httpx spent 10-12 ms of CPU per request at 200
    connections here, three times the API's own cost (``--client httpx`` measures with it)."""

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        url = httpx.URL(base)
        self._address = (url.host, url.port or 80)
        lines = [f"Host: {url.host}", *(f"{name}: {value}" for name, value in headers.items())]
        self._head = "\r\n".join(lines) + "\r\n\r\n"
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def get(self, path: str) -> int:
        """The answer's status. A kept-alive connection the server closed in the meantime
        (its keep-alive timeout) is replaced once, as HTTP allows for a GET."""
        if self._idle:
            connection = self._idle.pop()
            try:
                return await self._exchange(connection, path)
            except ConnectionClosed:
                pass
        return await self._exchange(await asyncio.open_connection(*self._address), path)

    async def _exchange(
        self, connection: tuple[asyncio.StreamReader, asyncio.StreamWriter], path: str
    ) -> int:
        reader, writer = connection
        try:
            writer.write(f"GET {path} HTTP/1.1\r\n{self._head}".encode())
            status_line = await reader.readline()
            if not status_line:
                raise ConnectionClosed("closed before the answer")
            status = int(status_line.split()[1])
            length, keep = 0, True
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "connection":
                    keep = "close" not in value.lower()
                elif name == "transfer-encoding":
                    raise ValueError(f"{path}: {value.strip()} answers are not read here")
            await reader.readexactly(length)
        except BaseException:
            writer.close()
            raise
        if keep:
            self._idle.append(connection)
        else:
            writer.close()
        return status

    async def aclose(self) -> None:
        for _reader, writer in self._idle:
            writer.close()
        self._idle.clear()


class ConnectionClosed(ConnectionError):
    """The server closed a kept-alive connection before answering."""


Get = Callable[[str], Awaitable[int]]


async def _timed(get: Get, path: str) -> Answer:
    started = time.perf_counter()
    try:
        status, error = await get(path), ""
    except (httpx.TransportError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
        status, error = 0, type(exc).__name__
    return Answer(path, (time.perf_counter() - started) * 1000, status, error)


async def _burst(get: Get, paths: list[str]) -> list[Answer]:
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(_timed(get, path)) for path in paths]
    return [task.result() for task in tasks]


# ------------------------------------------------------------------------ CPU, from /proc (Linux)


def _ticks(pid: int) -> int:
    """User and system CPU of one process, in clock ticks (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def _children() -> dict[int, list[int]]:
    """Every process's children, by the parent pid each one's /proc/PID/stat names."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            tree.setdefault(parent, []).append(int(entry.name))
    return tree


def _with_descendants(pid: int, tree: dict[int, list[int]]) -> list[int]:
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += tree.get(found[-1], [])
    return found


def _machine_busy_ticks() -> tuple[int, int]:
    """All cores together, since boot: (busy ticks, all ticks)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = values[3] + values[4]  # idle and iowait
    return sum(values) - idle, sum(values)


@dataclass
class CpuMeter:
    """CPU spent by each part during the bursts: the API's process (serve's child, when serve
    runs it in one), the rest of serve (the controllers), the workers, this bench, and the
    local Postgres's processes (a backend that exits during the bursts is not counted)."""

    server: Server
    start: dict[str, int] = field(default_factory=dict)
    machine: tuple[int, int] = (0, 0)
    wall: float = 0.0

    def _parts(self) -> dict[str, int]:
        tree = _children()
        serve, *workers = self.server.processes
        api = _api_pids(self.server, tree)
        rest = [p for p in _with_descendants(serve.pid, tree) if p not in api]
        return {
            "API process" + ("es" if len(api) > 1 else ""): sum(_ticks(p) for p in api),
            "serve (controllers" + (")" if api else ", and the API)"): sum(map(_ticks, rest)),
            "workers": sum(_ticks(p) for w in workers for p in _with_descendants(w.pid, tree)),
            "this bench (the client)": _ticks(os.getpid()),
            "Postgres (all of this host's)": sum(map(_ticks, _named(POSTGRES_PROCESS))),
        }

    def begin(self) -> None:
        self.start, self.machine, self.wall = self._parts(), _machine_busy_ticks(), time.monotonic()

    def report(self, requests: int) -> None:
        hz = os.sysconf("SC_CLK_TCK")
        wall = time.monotonic() - self.wall
        (busy_now, total_now), (busy_then, total_then) = _machine_busy_ticks(), self.machine
        share = (busy_now - busy_then) / max(1, total_now - total_then)
        cores = os.cpu_count() or 1
        print(f"CPU during the bursts, {wall:.1f} s; the {cores} cores {100 * share:.0f}% busy:")
        for part, ticks in self._parts().items():
            spent = (ticks - self.start.get(part, 0)) / hz
            if spent > 0 or part.startswith("API"):
                print(f"  {part:28s} {spent:6.2f} s  {1000 * spent / requests:5.2f} ms per request")


def _named(name: str) -> list[int]:
    """Every process whose command name is ``name`` (a local Postgres: its server and backends,
    those of other databases on this host too)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


async def _peak_connections(database: str, stop: asyncio.Event, peak: list[int]) -> None:
    connection = await asyncpg.connect(POSTGRES)
    try:
        while not stop.is_set():
            count = await connection.fetchval(CONNECTIONS_SQL, database)
            peak[0] = max(peak[0], int(count) - 1)  # less this sampler's own connection
            await asyncio.sleep(0.1)
    finally:
        await connection.close()


async def _cpu_per_route(get: Get, ids: list[str], server: Server) -> None:
    """The API processes' CPU per request of each kind, sent one after the other (no queueing:
    what one request of that kind costs while the jobs run)."""
    hz = os.sysconf("SC_CLK_TCK")
    costs = []
    for kind in range(5):
        paths = _paths(ids, PER_ROUTE, kinds=(kind,))
        before = _api_ticks(server)
        for path in paths:
            await get(path)
        spent = (_api_ticks(server) - before) / hz
        costs.append(f"{_kind(paths[0])} {1000 * spent / PER_ROUTE:.2f}")
    print(f"API CPU per request, one at a time ({PER_ROUTE} of each), ms: " + ", ".join(costs))


def _api_ticks(server: Server) -> int:
    return sum(map(_ticks, _api_pids(server, _children())))


def _api_pids(server: Server, tree: dict[int, list[int]]) -> list[int]:
    """serve's API processes (its children running ``--role api``), one or more."""
    return [c for c in tree.get(server.processes[0].pid, []) if "--role api" in _cmdline(c)]


def _kind(path: str) -> str:
    if path.endswith("/programs"):
        return "programs"
    if path.startswith("/api/v1/jobs/"):
        return "job"
    return path.rsplit("/", 1)[-1]


def _report(results: list[Answer], server: Server, peak: int, hold_s: float) -> None:
    latencies = np.array([answer.ms for answer in results])
    failed = [answer for answer in results if not answer.ok]
    log = server.serve_log()
    p50, p95, p99 = np.percentile(latencies, [50, 95, 99])
    print(f"requests {len(results)}: p50 {p50:.1f} ms, p95 {p95:.1f} ms, p99 {p99:.1f} ms")
    for kind in ("jobs", "job", "programs", "health", "workers"):
        mine = np.array([answer.ms for answer in results if _kind(answer.path) == kind])
        if len(mine):
            p50_kind, p99_kind = np.percentile(mine, [50, 99])
            print(f"  {kind:9s} p50 {p50_kind:7.1f} ms  p99 {p99_kind:7.1f} ms")
    kinds = sorted({(a.status or a.error, _kind(a.path)) for a in failed}, key=str)
    print(f"errors: {len(failed)}" + (f" (status or no answer, route: {kinds})" if kinds else ""))
    print(f"controller restarts: {log.count(RESTART_LINE)} (over {hold_s:.0f} s of running jobs)")
    print(f"pool timeouts: {log.count(POOL_TIMEOUT_LINE)}")
    print(f"database connections held by the server, at most: {peak}")


@asynccontextmanager
async def _load_client(client: httpx.AsyncClient, kind: str) -> AsyncIterator[Get]:
    """What sends the measured requests, with the token ``client`` holds."""
    if kind == "httpx":

        async def get(path: str) -> int:
            return (await client.get(path)).status_code

        yield get
        return
    lean = LeanClient(str(client.base_url), {"Authorization": client.headers["Authorization"]})
    try:
        yield lean.get
    finally:
        await lean.aclose()


async def bench(args: argparse.Namespace, server: Server) -> None:
    async with httpx.AsyncClient(
        base_url=server.base,
        timeout=60.0,
        limits=httpx.Limits(max_connections=args.requests, max_keepalive_connections=args.requests),
    ) as client:
        await _wait_healthy(client, server)
        ids = await _submit(client, args)
        started = time.monotonic()
        stop, peak = asyncio.Event(), [0]
        async with asyncio.TaskGroup() as tg, _load_client(client, args.client) as get:
            sampler = tg.create_task(_peak_connections(server.database, stop, peak))
            await _wait_running(client, ids)
            print(f"{args.jobs} jobs running after {time.monotonic() - started:.1f} s")
            results: list[Answer] = []
            mix = functools.partial(_paths, ids, every_job=args.every_job)
            await _burst(get, mix(args.requests))  # warm-up: connections, caches
            alone = [await _timed(get, path) for path in mix(SEQUENTIAL)]
            meter = CpuMeter(server)
            meter.begin()
            for _ in range(args.rounds):
                results += await _burst(get, mix(args.requests))
                await asyncio.sleep(args.pause_s)
            meter.report(len(results))
            await _cpu_per_route(get, ids, server)
            await asyncio.sleep(args.hold_s)  # the jobs keep running: restarts would show
            stop.set()
            await sampler
        _report(results, server, peak[0], time.monotonic() - started)
        one_by_one = np.percentile([answer.ms for answer in alone], [50, 99])
        print(f"one request at a time ({SEQUENTIAL}): p50 {one_by_one[0]:.1f} ms, ", end="")
        print(f"p99 {one_by_one[1]:.1f} ms")


def _serve_options(args: argparse.Namespace) -> list[str]:
    """The options given for serve itself; left out, serve's defaults."""
    options = []
    for name, value in (
        ("--api-processes", args.api_processes),
        ("--read-cache-s", args.read_cache_s),
    ):
        if value is not None:
            options += [name, str(value)]
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--requests", type=int, default=200, help="concurrent requests per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause-s", type=float, default=1.0, help="seconds between rounds")
    parser.add_argument("--hold-s", type=float, default=40.0, help="seconds of running at the end")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=2, help="evaluations per worker")
    parser.add_argument("--in-flight", type=int, default=2, help="proposals in flight per job")
    parser.add_argument(
        "--evaluator-s", type=float, default=0.5, help="seconds per evaluation (0: gemm-tiling)"
    )
    parser.add_argument(
        "--api-processes", type=int, default=None, help="serve's --api-processes (its default)"
    )
    parser.add_argument(
        "--every-job",
        action="store_true",
        help="a burst asks every job's detail and programs (default: the round-robin mix, 4 of "
        "20 jobs)",
    )
    parser.add_argument(
        "--read-cache-s",
        default=None,
        help="serve's --read-cache-s (its default); 0: every request reads the database",
    )
    parser.add_argument(
        "--client",
        choices=("lean", "httpx"),
        default="lean",
        help="what sends the measured requests (lean: see LeanClient)",
    )
    args = parser.parse_args()
    database = f"cv_bench_{uuid.uuid4().hex[:10]}"
    prefix = f"cvbench{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin(f'CREATE DATABASE "{database}"'))
    server = Server(database, prefix, Path(tempfile.mkdtemp(prefix="codevolve-serve-load-")))
    print(f"logs in {server.logs}")
    try:
        server.start(args.workers, args.concurrency, _serve_options(args))
        asyncio.run(bench(args, server))
    finally:
        server.stop()
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        client = redis_sync.Redis.from_url(REDIS)
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()


if __name__ == "__main__":
    main()
