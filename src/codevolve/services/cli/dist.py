"""Distributed-mode commands: ``serve``, ``worker``, ``submit``.

codevolve serve --db URL [--redis URL] [--port 8000 | --no-api]
codevolve worker --redis URL --capability cpu|gpu --concurrency N
codevolve submit gemm-tiling --proposals 1000 --seed 0 [--db URL] [--json]

In words: serve migrates the database, then runs the supervisor (a controller per queued or
running job) and, in the same event loop, the REST API and dashboard when they are installed.
worker needs only the Redis URL. submit creates a queued job that a running serve on the same
database picks up (it says so on stderr, so that --json output stays parseable).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import shlex
import signal
import sys
from typing import Any

from redis.asyncio import Redis

from codevolve.core.config import RunConfig
from codevolve.core.errors import ConfigError
from codevolve.evaluator_workers.redis_keys import CAPABILITIES, DEFAULT_PREFIX, RedisKeys
from codevolve.evaluator_workers.redis_queue import QueueTuning
from codevolve.services.cli.options import (
    JOB_KEYS,
    at_least,
    check_problem,
    config_error,
    db_option,
)
from codevolve.services.run_config import RunConfigRefused, run_config_of
from codevolve.services.settings import Settings

log = logging.getLogger(__name__)

API_MODULE = "codevolve.services.api.app"
FLEET_MODULE = "codevolve.services.api.fleet"  # the API's reader of the workers' heartbeats
DEFAULT_PORT = 8000


def register(sub: Any) -> None:
    """Add the distributed-mode commands to the ``codevolve`` parser's subcommands."""
    serve = sub.add_parser("serve", help="controller (and API): run every queued or running job")
    db_option(serve)
    serve.add_argument("--redis", default=None, help="Redis URL (default: CODEVOLVE_REDIS_URL)")
    serve.add_argument("--host", default="127.0.0.1", help="API address to listen on")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="API port")
    serve.add_argument("--no-api", action="store_true", help="run the controller only")
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
    asyncio.run(serve(args))
    return 0


async def serve(args: argparse.Namespace) -> None:
    """Migrate, then run the supervisor and (when installed) the API until SIGTERM or SIGINT.
    The controllers and the API have an engine each, their pools sized by role (runtime/pools)."""
    from codevolve.program_db.engine import create_engine, session_factory
    from codevolve.services.database import open_database
    from codevolve.services.runtime.embedded import tune_gc
    from codevolve.services.runtime.pools import api_pool, controller_pool
    from codevolve.services.runtime.supervisor import Supervisor, SupervisorOptions

    url = _redis_url(args, required=False)
    settings = Settings(db=args.db, redis_url=url)
    max_jobs = args.max_running_jobs or settings.max_running_jobs
    tune_gc()
    async with open_database(args.db, write=True) as migrated:  # migrated to head
        await migrated.dispose()  # its connection goes back: the roles have engines of their own
        engine = create_engine(args.db, pool=controller_pool(max_jobs))
        api_engine = create_engine(args.db, pool=api_pool(settings))
        redis = Redis.from_url(url, decode_responses=True) if url else None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, stop.set)
        try:
            sessions = session_factory(engine)
            keys = RedisKeys(args.key_prefix)
            supervisor = Supervisor(
                sessions,
                redis=redis,
                options=SupervisorOptions(
                    poll_s=args.poll_s,
                    local_workers=args.local_workers,
                    key_prefix=args.key_prefix,
                    proposal_processes=args.proposal_processes,
                    max_running_jobs=max_jobs,
                ),
            )
            api_sessions = session_factory(api_engine)
            server = None if args.no_api else _api_server(args, api_sessions, redis, keys)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(supervisor.run(stop))
                if server is not None:
                    tg.create_task(_serve_api(server, stop))
            log.info("serve stopped")
        finally:
            if redis is not None:
                await redis.aclose()
            await api_engine.dispose()
            await engine.dispose()


def _api_server(
    args: argparse.Namespace, sessions: Any, redis: Redis | None, keys: RedisKeys
) -> Any:
    """A uvicorn server of the API app, or None when this installation has no API."""
    try:
        api = importlib.import_module(API_MODULE)
        fleet_module = importlib.import_module(FLEET_MODULE)
    except ImportError as exc:
        log.warning("no API in this installation (%s); running the controller only", exc)
        return None
    import uvicorn

    fleet = None if redis is None else fleet_module.redis_fleet(redis, keys)
    settings = Settings(db=args.db, redis_url=_redis_url(args, required=False))
    app = api.create_app(settings, sessions=sessions, fleet=fleet)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", lifespan="on")
    return uvicorn.Server(config)


async def _serve_api(server: Any, stop: asyncio.Event) -> None:
    """Run uvicorn until it stops or ``stop`` is set; either way the whole serve stops."""

    async def watch() -> None:
        await stop.wait()
        server.should_exit = True

    async with asyncio.TaskGroup() as tg:
        watcher = tg.create_task(watch())
        try:
            await server.serve()
        finally:
            stop.set()
            watcher.cancel()
