"""Problems' results pages (core/results.py): for each installed plug-in with one, the API's
``GET /api/v1/<segment>``, the dashboard's page ``/<segment>`` and the JSON it polls
(``/live/<segment>.json``), all three the same table for the same viewer
(queries.results_answer). The routes are made with the app, from the registry's plug-ins."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse

from codevolve.core.plugin import ProblemPlugin
from codevolve.core.results import ResultsPage
from codevolve.services.api.auth import PrincipalDep, ViewerDep
from codevolve.services.api.deps import ReadSessionDep
from codevolve.services.api.queries import results_answer
from codevolve.services.api.routes.dashboard import templates
from codevolve.services.api.schemas import ResultsAnswer

UNAUTHORISED: dict[int | str, dict[str, Any]] = {401: {"description": "missing or invalid token"}}


def routers(plugins: Iterable[ProblemPlugin]) -> tuple[APIRouter, APIRouter]:
    """(the API's routes, the dashboard's routes) of the results pages of ``plugins``."""
    api, pages = APIRouter(), APIRouter(include_in_schema=False)
    for plugin in plugins:
        page = plugin.results
        assert page is not None  # the registry's results_pages
        api.add_api_route(
            f"/api/v1/{page.segment}",
            _answer(plugin),
            methods=["GET"],
            tags=[page.segment],
            summary=page.title,
            description=page.description,
            responses=UNAUTHORISED,
            name=f"results_{page.segment}",
        )
        pages.add_api_route(
            f"/{page.segment}",
            _page(plugin, page),
            methods=["GET"],
            response_class=HTMLResponse,
            name=f"results_page_{page.segment}",
        )
        pages.add_api_route(
            f"/live/{page.segment}.json",
            _live(plugin),
            methods=["GET"],
            name=f"results_live_{page.segment}",
        )
    return api, pages


def _answer(plugin: ProblemPlugin) -> Callable[..., Awaitable[ResultsAnswer]]:
    async def answer(session: ReadSessionDep, principal: PrincipalDep) -> ResultsAnswer:
        owner = None if principal.is_admin else principal.owner
        return await results_answer(session, plugin, owner=owner)

    return answer


def _page(plugin: ProblemPlugin, page: ResultsPage) -> Callable[..., Awaitable[HTMLResponse]]:
    async def results_page(
        request: Request, session: ReadSessionDep, viewer: ViewerDep
    ) -> HTMLResponse:
        """The table of ``GET /api/v1/<segment>``, built by the same function for the same
        viewer (a page cannot send the API's bearer token: the sign-in cookie stands for it)."""
        answer = await results_answer(session, plugin, owner=viewer.owner_filter)
        context = {
            "table": answer.model_dump(mode="json"),
            "results": page,
            "layout": _layout(page),
            "page": page.segment,
        }
        return templates.TemplateResponse(request, "results.html", context)

    return results_page


def _live(plugin: ProblemPlugin) -> Callable[..., Awaitable[JSONResponse]]:
    async def live(session: ReadSessionDep, viewer: ViewerDep) -> JSONResponse:
        answer = await results_answer(session, plugin, owner=viewer.owner_filter)
        return JSONResponse(answer.model_dump(mode="json"))

    return live


def _layout(page: ResultsPage) -> dict[str, Any]:
    """What the page's script draws the table and the figures by (dashboard.js: resultsPage)."""
    grid = page.grid
    return {
        "segment": page.segment,
        "columns": [
            {
                "field": c.field,
                "kind": c.kind,
                "digits": c.digits,
                "flag": c.flag,
                "note": c.note,
                "title": c.title,
            }
            for c in page.columns
        ],
        "grid": None
        if grid is None
        else {
            "lines": [list(line) for line in grid.lines],
            "columns": [k for k, _ in grid.columns],
        },
        "counts": page.counts,
        "empty": page.empty,
    }
