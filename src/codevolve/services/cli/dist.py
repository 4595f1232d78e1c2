"""Distributed-mode commands: ``serve``, ``worker``, ``submit``.

codevolve serve --db URL [--redis URL] [--port 8000] [--role all|controllers|api]
codevolve worker --redis URL --capability cpu|gpu --concurrency N
codevolve submit gemm-tiling --proposals 1000 --seed 0 [--db URL] [--json]

In words: serve migrates the database, then runs the supervisor (a controller per queued or
running job) in its own process and the REST API and dashboard in a child process (``--role api``,
runtime/server.py); ``--role controllers`` or ``--role api`` runs one part alone. worker needs
only the Redis URL. submit creates a queued job that a running serve on the same
database picks up (it says so on stderr, so that --json output stays parseable).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from collections.abc import Callable
from typing import Any

from codevolve.core.config import RunConfig
from codevolve.core.errors import ConfigError
from codevolve.evaluator_workers.redis_keys import CAPABILITIES, DEFAULT_PREFIX
from codevolve.evaluator_workers.redis_queue import QueueTuning
from codevolve.services.cli.options import (
    EXIT_FAILED,
    JOB_KEYS,
    REMEASURE_HELP,
    SIGNAL_EXIT,
    at_least,
    cache_dir_option,
    check_problem,
    config_error,
    db_option,
    seconds,
)
from codevolve.services.run_config import RunConfigRefused, run_config_of
from codevolve.services.runtime.processes import Command
from codevolve.services.settings import Settings

DEFAULT_PORT = 8000
MAX_PORT = 65535
ROLES = ("all", "controllers", "api")  # serve's parts: both, or one alone
CLI_MODULE = "codevolve.services.cli"  # what the API's child process runs: serve --role api


def register(sub: Any) -> None:
    """Add the distributed-mode commands to the ``codevolve`` parser's subcommands."""
    serve = sub.add_parser("serve", help="controllers for every queued or running job, and the API")
    db_option(serve)
    serve.add_argument("--redis", default=None, help="Redis URL (default: CODEVOLVE_REDIS_URL)")
    serve.add_argument("--host", default="127.0.0.1", help="API address to listen on")
    serve.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT, help="API port (0: any free port)"
    )
    serve.add_argument(
        "--role",
        choices=ROLES,
        default="all",
        help="all (default): the controllers here and the API in a child process; "
        "controllers or api: that part alone",
    )
    serve.add_argument(
        "--no-api",
        dest="role",
        action="store_const",
        const="controllers",
        help="the same as --role controllers",
    )
    serve.add_argument(
        "--api-processes",
        type=at_least(1),
        default=1,
        help="API processes (--role all), sharing the port: more answer a burst of requests "
        "sooner where cores are free; each has its own CODEVOLVE_API_POOL_SIZE connections",
    )
    serve.add_argument(
        "--read-cache-s",
        type=seconds,
        default=None,
        help="seconds each API process keeps a read answer (job list, job, programs, workers) "
        "for later requests; a write through that process clears it; 0: off (default: "
        "CODEVOLVE_API_READ_CACHE_S, else 1.0)",
    )
    # Set by serve for the API processes it starts (runtime/processes.py, runtime/api_server.py).
    serve.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    serve.add_argument("--listen-fd", type=int, default=None, help=argparse.SUPPRESS)
    serve.add_argument(
        "--local-workers",
        type=at_least(1),
        default=2,
        help="without Redis: in-process workers per job",
    )
    serve.add_argument("--poll-s", type=float, default=1.0, help="seconds between job scans")
    serve.add_argument(
        "--max-running-jobs",
        type=at_least(1),
        default=None,
        help="jobs run at once, more wait queued; sizes the database pool "
        "(default: CODEVOLVE_MAX_RUNNING_JOBS, else 20)",
    )
    proposal_processes_option(serve)
    _prefix_option(serve)
    serve.set_defaults(handler=_cmd_serve)

    worker = sub.add_parser("worker", help="evaluate tasks from Redis (no database access)")
    worker.add_argument("--redis", default=None, help="Redis URL (default: CODEVOLVE_REDIS_URL)")
    worker.add_argument("--capability", choices=CAPABILITIES, default="cpu")
    worker.add_argument(
        "--concurrency", type=at_least(1), default=1, help="evaluations at once (1)"
    )
    worker.add_argument(
        "--gpus", default=None, help="gpu: all (default) or ids; one worker process per GPU"
    )
    worker.add_argument("--name", default=None, help="worker name (default: host-pid-random)")
    worker.add_argument(
        "--lease-s", type=float, default=QueueTuning().lease_s, help="reclaim tasks idle this long"
    )
    worker.add_argument(
        "--max-deliveries",
        type=int,
        default=QueueTuning().max_deliveries,
        help="deliveries of a task before it is dead-lettered",
    )
    worker.add_argument("--heartbeat-s", type=float, default=5.0, help="seconds between beats")
    _prefix_option(worker)
    cache_dir_option(worker)
    worker.set_defaults(handler=_cmd_worker, db=None)

    submit = sub.add_parser(
        "submit", help="queue a job; a running `codevolve serve` on the same --db runs it"
    )
    submit.add_argument("problem", help="problem name, e.g. gemm-tiling, or bundle:<sha256>")
    submit.add_argument("--proposals", type=int, default=1000, help="proposal budget (1000)")
    submit.add_argument("--seed", type=int, default=0)
    submit.add_argument("--islands", type=int, default=None)
    submit.add_argument("--max-wall-s", type=float, default=None, help="wall-clock budget, s")
    submit.add_argument("--in-flight", type=int, default=None, help="proposals in flight at once")
    submit.add_argument("--remeasure-samples", type=int, default=None, help=REMEASURE_HELP)
    submit.add_argument("--config", default=None, help="JSON of further RunConfig fields")
    submit.add_argument("--owner", default="", help="owner recorded with the job")
    submit.add_argument("--json", action="store_true", help="print JSON")
    db_option(submit)
    submit.set_defaults(handler=_cmd_submit)


def proposal_processes_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--proposal-processes",
        type=_count,
        default=0,
        help="per job: child processes that make simulated proposals beside the controller "
        "(default 0: in its own process); for high slot counts, see docs/deploy.md",
    )


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a count (0 or more), got {text!r}")
    return value


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(
            f"must be a port number from 0 (any free port) to {MAX_PORT}, got {value}"
        )
    return value


def _prefix_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--key-prefix", default=DEFAULT_PREFIX, help="prefix of every Redis key (one deployment)"
    )


def _redis_url(args: argparse.Namespace, *, required: bool) -> str | None:
    url: str | None = args.redis or Settings().redis_url
    if required and not url:
        raise ConfigError("a Redis URL is needed: --redis URL or CODEVOLVE_REDIS_URL")
    return url


# ------------------------------------------------------------------------------------- submit


def run_config(args: argparse.Namespace) -> RunConfig:
    """The job's config from ``submit``'s options; a refused value names the option typed."""
    fields = _config_fields(args.config) | {"problem": args.problem}
    keys = {"seed": args.seed, "proposals": args.proposals}
    keys |= {key: value for key in JOB_KEYS if (value := getattr(args, key)) is not None}
    try:
        return run_config_of(keys, fields=fields)
    except RunConfigRefused as exc:
        raise config_error(exc, other="--config") from exc


def _config_fields(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--config {text!r}: not JSON ({exc.msg}); e.g. '{{\"islands\": 4}}'"
        ) from None
    if not isinstance(fields, dict):
        raise ConfigError(f"--config {text!r}: expected a JSON object of RunConfig fields")
    return fields


def _cmd_submit(args: argparse.Namespace) -> int:
    from codevolve.evaluator_workers.redis_bundles import bundle_id_of
    from codevolve.program_db import repository
    from codevolve.program_db.bundles import get_bundle
    from codevolve.services.database import database_session

    config = run_config(args)
    if bundle_id_of(config.problem) is None:
        check_problem(config.problem)  # fail early, suggesting the closest name

    async def go() -> str:
        async with database_session(args.db) as session:
            bundle = bundle_id_of(config.problem)
            if bundle is not None and await get_bundle(session, bundle) is None:
                raise ConfigError(f"{config.problem}: no such bundle in {args.db_shown}")
            job = await repository.create_job(session, config, owner=args.owner)
        return job.id

    job_id = asyncio.run(go())
    if args.json:
        print(json.dumps({"job_id": job_id, "state": "queued", "problem": config.problem}))
    else:
        print(job_id)
    db = "" if args.db_given is None else f" --db {shlex.quote(args.db_given)}"
    sys.stderr.write(
        f"job {job_id} is queued: a running `codevolve serve{db}` runs it; "
        f"`codevolve status {job_id}{db}` shows its progress\n"
    )
    return 0


# ------------------------------------------------------------------------------------- worker


def _cmd_worker(args: argparse.Namespace) -> int:
    """0 after a drain (SIGTERM or SIGINT once it runs); 130 or 143 when the signal came while
    it still waited for Redis to answer."""
    from codevolve.services.runtime.workers import StoppedBeforeStart

    try:
        return _worker(args)
    except StoppedBeforeStart as exc:
        sys.stderr.write(f"{exc}\n")
        return SIGNAL_EXIT.get(exc.signal_name, 130)


def _worker(args: argparse.Namespace) -> int:
    from codevolve.services.runtime.workers import WorkerOptions, run_worker_process

    url = _redis_url(args, required=True)
    assert url is not None
    options = WorkerOptions(
        key_prefix=args.key_prefix,
        tuning=QueueTuning(lease_s=args.lease_s, max_deliveries=args.max_deliveries),
        heartbeat_s=args.heartbeat_s,
    )
    if options.heartbeat_s * 2 > options.tuning.lease_s:
        raise ConfigError("--heartbeat-s must be under half of --lease-s, or leases lapse")
    if args.capability == "gpu" or args.gpus is not None:
        from codevolve.services.runtime.gpu_workers import run_gpu_workers

        return run_gpu_workers(
            url,
            capability=args.capability,
            gpus_wanted=args.gpus,
            concurrency=args.concurrency,
            name=args.name,
            options=options,
        )
    return run_worker_process(url, args.capability, args.concurrency, args.name, options=options)


# -------------------------------------------------------------------------------------- serve


def _cmd_serve(args: argparse.Namespace) -> int:
    """0 after SIGTERM or SIGINT; EXIT_FAILED when a part of the server ended on its own (the
    others were stopped; the log's error line says which and how)."""
    from codevolve.services.runtime.supervisor import SupervisorOptions

    url = _redis_url(args, required=False)
    chosen = {} if args.read_cache_s is None else {"api_read_cache_s": args.read_cache_s}
    settings = Settings(db=args.db, redis_url=url, **chosen)
    if args.role == "api":
        return 0 if asyncio.run(_serve_api(args, settings)) else EXIT_FAILED
    from codevolve.services.runtime.api_server import listening_socket
    from codevolve.services.runtime.server import serve

    options = SupervisorOptions(
        poll_s=args.poll_s,
        local_workers=args.local_workers,
        key_prefix=args.key_prefix,
        proposal_processes=args.proposal_processes,
        max_running_jobs=args.max_running_jobs or settings.max_running_jobs,
    )
    if args.role == "controllers":
        announce = _announce(
            f"running the jobs of {args.db_shown}; no API here (--role controllers)"
        )
        ended = asyncio.run(serve(args.db, url, options, api=(), on_start=announce))
        return 0 if ended is None else EXIT_FAILED
    # The port is bound here, before anything starts: a port in use is one line, and the API
    # processes share this one socket (each accepts from it).
    with listening_socket(args.host, args.port) as listener:
        api = [
            _api_command(args, url, listener.fileno(), number)
            for number in range(1, args.api_processes + 1)
        ]
        site = _site(args.host, listener.getsockname()[1])
        announce = _announce(
            f"running the jobs of {args.db_shown}; listening on {site}",
            f"dashboard: {site}/   REST API: {site}/api/v1   (Ctrl-C stops)",
        )
        ended = asyncio.run(serve(args.db, url, options, api=api, on_start=announce))
    return 0 if ended is None else EXIT_FAILED


def _site(host: str, port: int) -> str:
    """The URL a browser opens for the address ``serve`` listens on."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _announce(*lines: str) -> Callable[[], None]:
    """What ``serve`` prints once the database is ready, before it serves (stderr: the log's
    stream; stdout stays empty)."""

    def say() -> None:
        sys.stderr.write("".join(f"codevolve serve: {line}\n" for line in lines))
        sys.stderr.flush()

    return say


async def _serve_api(args: argparse.Namespace, settings: Settings) -> bool:
    from codevolve.services.runtime.api_server import ApiOptions, serve_api

    options = ApiOptions(
        host=args.host,
        port=args.port,
        key_prefix=args.key_prefix,
        parent_pid=args.parent_pid,
        listen_fd=args.listen_fd,
    )
    return await serve_api(settings, options)


def _api_command(args: argparse.Namespace, redis_url: str | None, fd: int, number: int) -> Command:
    """``serve --role api`` as this serve's child, accepting on the socket ``fd``. The database
    and Redis URLs go in its environment, not its command line, where ``ps`` would show their
    passwords."""
    argv = [sys.executable, "-m", CLI_MODULE]
    if args.log_level:
        argv += ["--log-level", args.log_level]
    argv += ["serve", "--role", "api", "--host", args.host, "--port", str(args.port)]
    argv += ["--key-prefix", args.key_prefix, "--parent-pid", str(os.getpid())]
    argv += ["--listen-fd", str(fd)]
    if args.read_cache_s is not None:
        argv += ["--read-cache-s", repr(args.read_cache_s)]
    env = {name: value for name, value in os.environ.items() if name != "CODEVOLVE_REDIS_URL"}
    env["CODEVOLVE_DB"] = args.db
    if redis_url is not None:
        env["CODEVOLVE_REDIS_URL"] = redis_url
    name = "API" if args.api_processes == 1 else f"API {number}"
    return Command(name=name, argv=tuple(argv), env=env, pass_fds=(fd,))
