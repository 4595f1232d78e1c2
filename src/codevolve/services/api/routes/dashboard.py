"""The dashboard: server-rendered pages (jobs, a job, a program, the fleet; problems' results
pages are routes/results.py) and the JSON their scripts poll to stay live. Readable by anyone when
``public_dashboard`` is set, else with a token (Authorization header, or the cookie ``/login``
sets). Not part of the OpenAPI schema."""

from __future__ import annotations

import json
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from codevolve.core.job import Job
from codevolve.program_db import repository
from codevolve.services.api.auth import COOKIE, ViewerDep, is_https, principal_of
from codevolve.services.api.deps import ReadSessionDep, state_of
from codevolve.services.api.fleet import FleetUnreachable
from codevolve.services.api.highlight import highlight_python, line_numbers, render_diff
from codevolve.services.api.queries import (
    job_figures_detail,
    job_live,
    program_detail,
    visible_job,
    visible_program,
)
from codevolve.services.api.routes.system import fleet_unreachable, read_fleet
from codevolve.services.api.schemas import Fleet, JobPublic

router = APIRouter(include_in_schema=False)


def _navigation(request: Request) -> dict[str, Any]:
    """Every page's links to the problems' results pages (the app's, routes/results.py)."""
    return {"results_pages": state_of(request).results_pages}


templates = Jinja2Templates(
    directory=FilePath(__file__).parent.parent / "templates", context_processors=[_navigation]
)
IdPath = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$")]


def _score(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def _json_script(data: Any) -> Markup:
    """JSON safe inside ``<script type="application/json">`` (no ``</script>`` can close it)."""
    text = json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)


templates.env.filters["score"] = _score
templates.env.filters["json_script"] = _json_script
templates.env.globals["session_cookie"] = COOKIE  # its presence shows "Sign out"


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "login.html", {"page": "login", "failed": False})


@router.post("/login", response_model=None)
async def login(
    request: Request, token: Annotated[str, Form(max_length=500)]
) -> RedirectResponse | HTMLResponse:
    """Check the token and sign in: the cookie, which the pages and polls then carry, holds a
    session id (HttpOnly, SameSite=Strict, Secure over HTTPS); a form post, so the token never
    appears in a URL or an access log."""
    if await principal_of(request, token) is None:
        context = {"page": "login", "failed": True}
        return templates.TemplateResponse(request, "login.html", context, status_code=401)
    logins = state_of(request).logins
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        COOKIE,
        logins.open(token),
        max_age=int(logins.ttl_s),
        httponly=True,
        samesite="strict",
        secure=is_https(request),
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> RedirectResponse:
    """Sign out: the session ends here and its cookie is cleared."""
    state_of(request).logins.close(request.cookies.get(COOKIE, ""))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, httponly=True, samesite="strict", secure=is_https(request))
    return response


async def _jobs(session: ReadSessionDep, viewer: ViewerDep) -> list[dict[str, Any]]:
    jobs = await repository.list_jobs(session, owner=viewer.owner_filter)
    return [JobPublic.of(job).model_dump(mode="json") for job in jobs]


@router.get("/", response_class=HTMLResponse)
async def jobs_page(request: Request, session: ReadSessionDep, viewer: ViewerDep) -> HTMLResponse:
    jobs = await _jobs(session, viewer)
    return templates.TemplateResponse(request, "jobs.html", {"jobs": jobs, "page": "jobs"})


@router.get("/live/jobs.json")
async def jobs_live(session: ReadSessionDep, viewer: ViewerDep) -> JSONResponse:
    return JSONResponse({"jobs": await _jobs(session, viewer)})


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(
    request: Request, job_id: IdPath, session: ReadSessionDep, viewer: ViewerDep
) -> HTMLResponse:
    job = await visible_job(session, job_id, owner=viewer.owner_filter)
    live = await _job_live(request, session, job)
    context = {
        "job": (await job_figures_detail(session, job)).model_dump(),
        "live": live,
        "page": "job",
    }
    return templates.TemplateResponse(request, "job.html", context)


@router.get("/jobs/{job_id}/live.json")
async def job_live_json(
    request: Request, job_id: IdPath, session: ReadSessionDep, viewer: ViewerDep
) -> JSONResponse:
    job = await visible_job(session, job_id, owner=viewer.owner_filter)
    return JSONResponse(await _job_live(request, session, job))


async def _job_live(request: Request, session: ReadSessionDep, job: Job) -> dict[str, Any]:
    """The job page's data; ``fleet_unreachable`` says why a job that still needs workers may
    not progress (a banner), null while the fleet answers or the job is finished."""
    down = None if job.state.finished else await fleet_unreachable(request)
    return await job_live(session, job) | {"fleet_unreachable": down}


@router.get("/programs/{program_id}", response_class=HTMLResponse)
async def program_page(
    request: Request, program_id: IdPath, session: ReadSessionDep, viewer: ViewerDep
) -> HTMLResponse:
    program = await visible_program(session, program_id, owner=viewer.owner_filter)
    detail = await program_detail(session, program)
    context = {
        "program": detail,
        "code": highlight_python(detail.source),
        "numbers": line_numbers(detail.source),
        "diff": render_diff(detail.diff_to_parent),
        "page": "program",
    }
    return templates.TemplateResponse(request, "program.html", context)


@router.get("/workers", response_class=HTMLResponse)
async def workers_page(request: Request, viewer: ViewerDep) -> HTMLResponse:
    try:
        fleet, unreachable = await read_fleet(request), None
    except FleetUnreachable as exc:
        fleet, unreachable = Fleet(mode="distributed", workers=[]), str(exc)
    context = {"fleet": fleet, "unreachable": unreachable, "page": "workers"}
    return templates.TemplateResponse(request, "workers.html", context)
