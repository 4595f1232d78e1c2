"""Jobs: create (a built-in problem or an uploaded bundle), list, get, pause, resume, cancel; a
job's programs and its best programs.

A created job is queued; the supervisor of ``codevolve serve`` runs it. Pause and cancel set the
state the running controller watches; resume queues the job again. In distributed mode a job whose
cascade needs a capability no live worker serves (``gpu``) is refused with a 409 naming it: it
would wait, or fail, with nothing to say why.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError

from codevolve.core.config import RunConfig
from codevolve.core.device import CPU, needed_capabilities
from codevolve.core.job import Job, JobState
from codevolve.core.program import ProgramStatus
from codevolve.problems.openevolve.bundle import BundleError
from codevolve.program_db import repository
from codevolve.program_db.bundles import BUNDLE_PROBLEM_PREFIX
from codevolve.program_db.program_page import Page, ProgramOrder
from codevolve.services.api.auth import Principal, PrincipalDep, UploaderDep
from codevolve.services.api.bundle_check import BundleRejected, load_bundle
from codevolve.services.api.deps import (
    ReadSessionDep,
    SessionDep,
    kept_answer,
    read_sessions_of,
    state_of,
)
from codevolve.services.api.fleet import FleetUnreachable
from codevolve.services.api.queries import (
    top_programs,
    visible_job,
    visible_job_detail,
    visible_program_page,
)
from codevolve.services.api.schemas import (
    BundleJobCreate,
    BundleJobPublic,
    JobConfigIn,
    JobCreate,
    JobDetail,
    JobList,
    JobPublic,
    ProgramPage,
    ProgramSummary,
)
from codevolve.services.run_config import RunConfigRefused, bundle_run_config, run_config_of
from codevolve.services.runtime.problems import cached_problem  # builds each problem once

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])
JobIdPath = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="job id (uuid4 hex)")]
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or invalid token"},
    404: {"description": "no such job (or another owner's)"},
}


def _owner(principal: Principal) -> str | None:
    return None if principal.is_admin else principal.owner


def _field_error(loc: tuple[str | int, ...], message: str, kind: str) -> RequestValidationError:
    return RequestValidationError([{"loc": ("body", *loc), "msg": message, "type": kind}])


def run_config(problem: str, config: JobConfigIn) -> RunConfig:
    """The RunConfig of a request; a cross-field error names the JSON key at fault."""
    try:
        return run_config_of(config.given_keys(), fields={"problem": problem})
    except RunConfigRefused as refused:
        raise _refused(refused) from refused


def _refused(refused: RunConfigRefused) -> RequestValidationError:
    """The 422 of values the RunConfig refused, each named by the JSON key the client sent."""
    errors = []
    for refusal in refused.refusals:
        field = str(refusal.location[0]) if refusal.location else ""
        loc = ("config", refusal.key or field) if field else ("config",)
        errors.append({"loc": ("body", *loc), "msg": refusal.message, "type": refusal.kind})
    return RequestValidationError(errors)


async def _check_bundle(session: SessionDep, problem: str, principal: Principal) -> None:
    """A ``bundle:<sha256>`` problem runs uploaded code: the upload right, and a stored bundle.
    Built-in names were checked by the schema."""
    if not problem.startswith(BUNDLE_PROBLEM_PREFIX):
        return
    if not principal.can_upload:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="this token lacks can_upload")
    if await repository.get_bundle(session, problem) is None:
        raise _field_error(("problem",), f"no uploaded bundle {problem}", "unknown_bundle")


async def _check_workers(request: Request, problem: str) -> None:
    """Distributed mode: refuse a problem whose stages need a capability beyond ``cpu`` that no
    live worker serves. CPU work waits in the queue for a CPU worker; embedded mode has no fleet
    to ask (the server's own workers decide); uploaded bundles run on CPU workers."""
    fleet = state_of(request).fleet
    if fleet is None or problem.startswith(BUNDLE_PROBLEM_PREFIX):
        return
    needed = needed_capabilities(cached_problem(problem).stages) - {CPU}
    if not needed:
        return
    try:
        served = {capability for worker in await fleet() for capability in worker.capabilities}
    except FleetUnreachable as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=str(exc)) from None
    missing = sorted(needed - served)
    if missing:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            detail=f"problem {problem} needs a worker with capability {missing[0]!r} and no live "
            f"worker has it: start one (codevolve worker --capability {missing[0]}), then retry",
        )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={
        **_ERRORS,
        409: {"description": "no live worker has a capability it needs"},
        503: {"description": "it needs a GPU worker and the fleet cannot be read"},
    },
)
async def create_job(
    request: Request, body: JobCreate, session: SessionDep, principal: PrincipalDep
) -> JobPublic:
    """Queue a job of a built-in problem (or of an uploaded ``bundle:<sha256>``)."""
    config = run_config(body.problem, body.config)
    await _check_bundle(session, body.problem, principal)
    await _check_workers(request, body.problem)
    job = await repository.create_job(session, config, owner=principal.owner)
    return JobPublic.of(job)


@router.post(
    "/bundle",
    status_code=status.HTTP_201_CREATED,
    responses={
        **_ERRORS,
        403: {"description": "the token may not upload"},
        413: {"description": "bundle too large"},
    },
)
async def create_bundle_job(
    body: BundleJobCreate, session: SessionDep, principal: UploaderDep
) -> BundleJobPublic:
    """Upload a problem bundle (OpenEvolve layout, files as base64) and queue a job on it.

    The job's config is the bundle's ``config.yaml`` (``max_iterations``, ``random_seed``...)
    with the request's ``config`` keys on top; keys that do not carry over are listed in
    ``warnings``."""
    try:
        bundle = load_bundle(body.files)
    except BundleRejected as rejected:
        if rejected.too_large:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, detail=str(rejected)) from None
        raise RequestValidationError(
            [
                {"loc": ("body", "files", p.path), "msg": p.message, "type": "bad_bundle"}
                for p in rejected.problems
            ]
        ) from None
    try:  # config.yaml mapped onto the run config, the request's keys on top
        config, warnings = bundle_run_config(bundle, body.config.given_keys())
    except RunConfigRefused as refused:  # a key the request sent
        raise _refused(refused) from None
    except BundleError as error:
        raise _field_error(("config",), str(error), "bad_config") from None
    await repository.store_bundle(
        session, identity=bundle.id, owner=principal.owner, files=bundle.files
    )
    job = await repository.create_job(session, config, owner=principal.owner)
    return BundleJobPublic(**JobPublic.of(job).model_dump(), warnings=list(warnings))


@router.get("", response_model=JobList, responses={401: _ERRORS[401]})
async def list_jobs(
    request: Request,
    principal: PrincipalDep,
    state: Annotated[JobState | None, Query(description="only jobs in this state")] = None,
) -> Response:
    """Your jobs (every job for the admin), newest first."""
    owner = _owner(principal)

    async def read() -> JobList:
        async with read_sessions_of(request)() as session:
            jobs = await repository.list_jobs(session, owner=owner)
        return JobList(jobs=[JobPublic.of(j) for j in jobs if state is None or j.state is state])

    return await kept_answer(request, ("jobs", owner, state), read)


@router.get("/{job_id}", response_model=JobDetail, responses=_ERRORS)
async def get_job(request: Request, job_id: JobIdPath, principal: PrincipalDep) -> Response:
    owner = _owner(principal)

    async def read() -> JobDetail:
        async with read_sessions_of(request)() as session:
            return await visible_job_detail(session, job_id, owner=owner)

    return await kept_answer(request, ("job", owner, job_id), read)


# A control action is allowed from these states; anything else is a 409.
_TRANSITIONS: dict[str, tuple[frozenset[JobState], JobState]] = {
    "pause": (frozenset({JobState.QUEUED, JobState.RUNNING}), JobState.PAUSED),
    "resume": (frozenset({JobState.PAUSED}), JobState.QUEUED),
    "cancel": (
        frozenset({JobState.QUEUED, JobState.RUNNING, JobState.PAUSED}),
        JobState.CANCELLED,
    ),
}


async def _control(session: SessionDep, principal: Principal, job_id: str, action: str) -> Job:
    job = await visible_job(session, job_id, owner=_owner(principal))
    allowed, target = _TRANSITIONS[action]
    if job.state not in allowed:
        raise HTTPException(
            status.HTTP_409_CONFLICT, detail=f"cannot {action} a job that is {job.state.value}"
        )
    await repository.set_job_state(session, job.id, target, error=job.error)
    updated = await repository.get_job(session, job.id)
    assert updated is not None  # the update above found it
    return updated


_CONTROL_ERRORS = {**_ERRORS, 409: {"description": "not allowed in the job's state"}}


@router.post("/{job_id}/pause", responses=_CONTROL_ERRORS)
async def pause_job(job_id: JobIdPath, session: SessionDep, principal: PrincipalDep) -> JobPublic:
    """Pause a queued or running job; its controller stops at the next check (~2 s)."""
    return JobPublic.of(await _control(session, principal, job_id, "pause"))


@router.post("/{job_id}/resume", responses=_CONTROL_ERRORS)
async def resume_job(job_id: JobIdPath, session: SessionDep, principal: PrincipalDep) -> JobPublic:
    """Queue a paused job again; it resumes where it stopped."""
    return JobPublic.of(await _control(session, principal, job_id, "resume"))


@router.post("/{job_id}/cancel", responses=_CONTROL_ERRORS)
async def cancel_job(job_id: JobIdPath, session: SessionDep, principal: PrincipalDep) -> JobPublic:
    """Cancel a job for good."""
    return JobPublic.of(await _control(session, principal, job_id, "cancel"))


@router.get("/{job_id}/programs", response_model=ProgramPage, responses=_ERRORS)
async def list_job_programs(
    request: Request,
    job_id: JobIdPath,
    principal: PrincipalDep,
    island: Annotated[int | None, Query(ge=0, le=255)] = None,
    program_status: Annotated[ProgramStatus | None, Query(alias="status")] = None,
    sort: Annotated[ProgramOrder, Query(description="score (best first), index, newest")] = "score",
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> Response:
    """A page of the job's programs, filtered by island and status."""
    owner = _owner(principal)
    page = Page(
        job_id, status=program_status, island=island, limit=limit, offset=offset, order=sort
    )

    async def read() -> ProgramPage:
        async with read_sessions_of(request)() as session:
            return await visible_program_page(session, page, owner=owner)

    return await kept_answer(request, ("programs", owner, page), read)


@router.get("/{job_id}/best", responses=_ERRORS)
async def best_programs(
    job_id: JobIdPath,
    session: ReadSessionDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> list[ProgramSummary]:
    """The job's best evaluated programs, best first."""
    await visible_job(session, job_id, owner=_owner(principal))
    return await top_programs(session, job_id, limit)
