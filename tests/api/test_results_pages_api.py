"""A problem plug-in's results page is served from its read model alone: a toy plug-in (here,
not installed) gets ``GET /api/v1/<segment>``, the dashboard page ``/<segment>`` with its link in
the navigation, and ``/live/<segment>.json``, all the same table; rows are its jobs' only, one
per owner and case (the newest job's), with the fields it hides left out."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import httpx
import pytest

from codevolve.core.config import RunConfig
from codevolve.core.job import JobState
from codevolve.core.plugin import ProblemPlugin
from codevolve.core.problem import Problem
from codevolve.core.program import StageResult
from codevolve.core.results import Column, Grid, JobResults, ResultsPage, Row
from codevolve.problems import registry
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.services.api.app import create_app
from codevolve.services.settings import Settings
from tests.api.conftest import ADMIN_TOKEN, Api, seed_job
from tests.stored_programs import evaluated_program


def _never_built() -> Problem:
    raise AssertionError("a results page builds no problem")


async def _row(records: JobResults) -> Row | None:
    job = records.job
    best = await records.best_program()
    return {
        "job_id": job.id,
        "state": job.state.value,
        "case": job.config.label,
        "score": job.best_score,
        "solved": best is not None,
        "proposals": await records.proposals(),
        "source": None if best is None else best.source,  # hidden from the page
    }


def _summary(rows: Sequence[Row], missing: int) -> Mapping[str, Any]:
    solved = sum(bool(row["solved"]) for row in rows)
    return {"cases": len(rows) + missing, "share": {"solved": solved / len(rows)} if rows else {}}


TOY = ProblemPlugin(
    name="toy",
    problem=_never_built,
    results=ResultsPage(
        segment="toy-results",
        title="Toy results",
        subtitle="each case's best",
        key="case",
        row=_row,
        summary=_summary,
        columns=(
            Column("case", "Case"),
            Column("score", "Score", "number", digits=3),
            Column("job_id", "Job", "job"),
        ),
        grid=Grid("share", "solved cases", "Of", (("share", "all"),), (("solved", "solved"),)),
        counts="{cases} case{cases|s}",
        hidden=("source",),
    ),
)


@pytest.fixture
async def toy_api(
    migrated_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Api]:
    installed = dict(registry.plugins()) | {TOY.name: TOY}
    monkeypatch.setattr(registry, "plugins", lambda: MappingProxyType(installed))
    engine = create_engine(migrated_postgres_url)
    sessions = session_factory(engine)
    settings = Settings(db=migrated_postgres_url, admin_token=ADMIN_TOKEN, public_dashboard=False)
    app = create_app(settings, sessions=sessions)
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://t"
            ) as client,
        ):
            yield Api(client=client, sessions=sessions)
    finally:
        await engine.dispose()


async def _toy_job(api: Api, *, owner: str, case: str, score: float | None) -> str:
    async with api.sessions.begin() as session:
        config = RunConfig(problem="toy", max_proposals=5, label=case)
        job = await repository.create_job(session, config, owner=owner)
        if score is not None:
            stage = StageResult(stage="toy", passed=True, score=score)
            best = await evaluated_program(
                session, job.id, "print('best')", stage, generation=0, proposal_index=-1
            )
            await repository.set_job_best(session, job.id, best, score)
        await repository.set_job_state(session, job.id, JobState.DONE)
    return job.id


async def test_a_plugins_read_model_is_served_by_the_api_and_the_dashboard(toy_api: Api) -> None:
    alice = await toy_api.token("alice")
    await _toy_job(toy_api, owner="alice", case="a", score=None)  # replaced by the re-run below
    newest = await _toy_job(toy_api, owner="alice", case="a", score=0.5)
    other = await _toy_job(toy_api, owner="alice", case="b", score=None)
    gemm_job, _ = await seed_job(toy_api, owner="alice", programs=2)

    answer = await toy_api.client.get("/api/v1/toy-results", headers=alice)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [row["job_id"] for row in body["rows"]] == [other, newest]  # newest first
    assert body["rows"][1] == {
        "job_id": newest,
        "state": "done",
        "case": "a",
        "score": 0.5,
        "solved": True,
        "proposals": 0,
    }
    assert gemm_job not in answer.text and "print('best')" not in answer.text
    assert body["summary"] == {"cases": 2, "share": {"solved": 0.5}}

    page = await toy_api.client.get("/toy-results", headers=alice)
    assert page.status_code == 200
    assert '<a href="/toy-results" class="active">Toy results</a>' in page.text
    assert '<a href="/kernelbench" >KernelBench</a>' in page.text  # the installed pages stay
    data = re.search(r'<script type="application/json" id="results-data">(.*?)</script>', page.text)
    assert data is not None and json.loads(data.group(1)) == body
    layout = re.search(r'id="results-layout">(.*?)</script>', page.text)
    assert layout is not None
    assert [c["field"] for c in json.loads(layout.group(1))["columns"]] == [
        "case",
        "score",
        "job_id",
    ]
    live = await toy_api.client.get("/live/toy-results.json", headers=alice)
    assert live.json() == body


async def test_a_results_page_needs_a_token_and_shows_only_the_callers_jobs(toy_api: Api) -> None:
    await _toy_job(toy_api, owner="bob", case="a", score=1.0)
    assert (await toy_api.client.get("/api/v1/toy-results")).status_code == 401
    assert (await toy_api.client.get("/live/toy-results.json")).status_code == 401
    carol = await toy_api.token("carol")
    body = (await toy_api.client.get("/api/v1/toy-results", headers=carol)).json()
    assert body == {"rows": [], "summary": {"cases": 0, "share": {}}}


async def test_without_the_plugin_its_page_is_not_served(api: Api) -> None:
    alice = await api.token("alice")
    assert (await api.client.get("/api/v1/toy-results", headers=alice)).status_code == 404
