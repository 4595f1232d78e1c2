"""Health, Prometheus metrics and the worker fleet."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response, status
from fastapi.responses import PlainTextResponse

import codevolve
from codevolve.problems.registry import problem_names
from codevolve.program_db import repository
from codevolve.services.api.auth import MetricsReaderDep, PrincipalDep
from codevolve.services.api.deps import ReadSessionDep, WorkerStatus, kept_answer, state_of
from codevolve.services.api.fleet import FleetUnreachable
from codevolve.services.api.health import Health
from codevolve.services.api.schemas import Fleet, WorkerPublic

router = APIRouter(tags=["system"])
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@router.get(
    "/api/v1/health",
    responses={503: {"model": Health, "description": "the database does not answer"}},
)
async def health(request: Request, response: Response) -> Health:
    """Up, and each dependency's state: ``status`` ok or degraded; HTTP 200 while the database
    answers, 503 when it does not (health.py). Never waits behind the API's pool."""
    probe = state_of(request).health
    if probe is None:
        raise RuntimeError("the app has no health probe: run its lifespan")
    checks = await probe.check()
    degraded = any(check.status == "down" for check in checks.values())
    if checks["database"].status != "ok":
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return Health(
        status="degraded" if degraded else "ok",
        database=checks["database"].status,
        redis=checks["redis"].status,
        dependencies=checks,
        version=codevolve.__version__,
        problems=problem_names(),
    )


async def read_fleet(request: Request) -> Fleet:
    """The fleet; :class:`FleetUnreachable` while its heartbeats cannot be read."""
    reader = state_of(request).fleet
    if reader is None:
        return Fleet(mode="embedded", workers=[])
    return Fleet(mode="distributed", workers=[_worker(w) for w in await reader()])


async def fleet_unreachable(request: Request) -> str | None:
    """Why the fleet cannot be read, as one sentence; None while it can (or in embedded mode)."""
    try:
        await read_fleet(request)
    except FleetUnreachable as exc:
        return str(exc)
    return None


def _worker(worker: WorkerStatus) -> WorkerPublic:
    return WorkerPublic(
        name=worker.name,
        capabilities=list(worker.capabilities),
        last_seen=worker.last_seen,
        busy=worker.busy,
        concurrency=worker.concurrency,
        host=worker.host,
        gpu_model=worker.gpu_model,
    )


@router.get(
    "/api/v1/workers",
    response_model=Fleet,
    responses={
        401: {"description": "missing or invalid token"},
        503: {"description": "the workers' heartbeats cannot be read (Redis does not answer)"},
    },
)
async def workers(request: Request, _principal: PrincipalDep) -> Response:
    """The evaluation workers seen by their heartbeats (embedded mode: in-process, none listed)."""
    try:
        return await kept_answer(request, ("workers",), lambda: read_fleet(request))
    except FleetUnreachable as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=str(exc)) from None


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    dependencies=[MetricsReaderDep],
    responses={401: {"description": "missing or invalid metrics token"}},
)
async def metrics(request: Request, session: ReadSessionDep) -> PlainTextResponse:
    """Prometheus text format: jobs per state, programs per status, workers (every owner's).
    Needs the metrics or admin token, unless ``CODEVOLVE_PUBLIC_METRICS`` is set."""
    jobs = await repository.jobs_by_state(session)
    programs = await repository.programs_by_status(session)
    try:
        workers: list[str] = [f"codevolve_workers {len((await read_fleet(request)).workers)}"]
    except FleetUnreachable:  # an unknown count is left out, not reported as 0
        workers = []
    lines = [
        "# HELP codevolve_jobs Jobs by state.",
        "# TYPE codevolve_jobs gauge",
        *(f'codevolve_jobs{{state="{state}"}} {n}' for state, n in sorted(jobs.items())),
        "# HELP codevolve_programs Programs by status.",
        "# TYPE codevolve_programs gauge",
        *(f'codevolve_programs{{status="{s}"}} {n}' for s, n in sorted(programs.items())),
        "# HELP codevolve_workers Workers with a live heartbeat (absent: Redis unreachable).",
        "# TYPE codevolve_workers gauge",
        *workers,
        "",
    ]
    return PlainTextResponse("\n".join(lines), media_type=PROMETHEUS_TEXT)
