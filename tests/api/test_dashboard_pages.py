"""The dashboard's server-rendered pages and live JSON (the browser test draws them for real)."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from codevolve.services.api.app import create_app
from codevolve.services.api.highlight import highlight_python, render_diff
from codevolve.services.api.queries import _thin
from codevolve.services.settings import Settings
from tests.api.conftest import Api, seed_job


async def test_job_page_embeds_the_chart_and_heatmap_data(api: Api) -> None:
    headers = await api.token("alice")
    job_id, programs = await seed_job(api, owner="alice", programs=4)
    page = await api.client.get(f"/jobs/{job_id}", headers=headers)
    assert page.status_code == 200
    match = re.search(r'<script type="application/json" id="job-data">(.*?)</script>', page.text)
    assert match is not None
    data = json.loads(match.group(1))
    assert [point[2] for point in data["history"]] == [1.0, 1.1, 1.2, 1.3]
    assert {island["island"]: len(island["cells"]) for island in data["islands"]} == {0: 2, 1: 2}
    assert data["features"] and data["features"][0]["bins"] > 0  # gemm-tiling's axes
    assert data["top"][0]["id"] == programs[-1].id
    live = await api.client.get(f"/jobs/{job_id}/live.json", headers=headers)
    assert live.json()["job"]["best_score"] == pytest.approx(1.3)


async def test_program_page_shows_highlighted_source_and_the_diff(api: Api) -> None:
    headers = await api.token("alice")
    _, programs = await seed_job(api, owner="alice", programs=2)
    page = await api.client.get(f"/programs/{programs[1].id}", headers=headers)
    assert page.status_code == 200
    assert '<span class="tok-kw">def</span> <span class="tok-def">f</span>' in page.text
    assert '<span class="diff-add">+    return 2</span>' in page.text
    assert "warning: x" in page.text  # the artifact
    assert "improve &lt;f&gt; step 1" in page.text  # the logged prompt, escaped


async def test_jobs_page_and_workers_page_render(api: Api) -> None:
    headers = await api.token("alice")
    job_id, _ = await seed_job(api, owner="alice", programs=1)
    jobs = await api.client.get("/", headers=headers)
    assert job_id[:8] in jobs.text and "1.0000" in jobs.text
    workers = await api.client.get("/workers", headers=headers)
    assert "Embedded mode" in workers.text


async def test_a_public_dashboard_needs_no_token_but_the_api_still_does(
    migrated_sqlite_url: str,
) -> None:
    settings = Settings(db=migrated_sqlite_url, public_dashboard=True, admin_token=None)
    app = create_app(settings)  # its lifespan opens the database
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://test") as client,
    ):
        assert (await client.get("/")).status_code == 200
        assert (await client.get("/workers")).status_code == 200
        assert (await client.get("/api/v1/jobs")).status_code == 401
        script = await client.get("/static/dashboard.js")
        assert "drawHeatmaps" in script.text


def test_highlighting_escapes_html_and_survives_broken_source() -> None:
    html = highlight_python('x = "<b>"  # <i>\n')
    assert "<b>" not in html and "&lt;b&gt;" in html
    assert 'class="tok-com"' in html
    broken = highlight_python('s = """never closed\n<script>')
    assert "<script>" not in broken and "never closed" in broken
    assert "<script>" not in render_diff("+<script>\n-x")


def test_a_thinned_history_keeps_every_new_best() -> None:
    history = [(i, i % 3, float(i % 50) + i / 1000) for i in range(1000)]
    thinned = _thin(history, step=10)
    assert len(thinned) < 200
    records, best = [], -1.0
    for point in history:
        if point[2] > best:
            records.append(point)
            best = point[2]
    assert set(records) <= set(thinned)
    assert _thin(history, step=1) == history
