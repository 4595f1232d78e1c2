"""The job view and the job page show the best as confirmed on independent samples: the figure
it was picked on, the confirmed one, the winner's-curse note and the spread."""

from __future__ import annotations

from codevolve.core.measurement import Remeasure, Verdict, spread
from codevolve.program_db import repository
from tests.api.conftest import Api, seed_job

NOTE = "winner's curse: 1.300x when picked, 1.100x on independent samples (15% less)"


async def _confirm_last(api: Api, job_id: str, program_id: str) -> None:
    remeasure = Remeasure(
        Verdict.CONFIRMED, 1.3, (1.0, 1.1, 1.2), 1.1, NOTE, spread([1.0, 1.1, 1.2]), None
    )
    async with api.sessions.begin() as session:
        await repository.record_remeasure(session, program_id, remeasure)
        await repository.set_job_best(session, job_id, program_id, 1.1)


async def test_the_job_view_and_page_show_the_confirmed_best_and_its_spread(api: Api) -> None:
    headers = await api.token("alice")
    job_id, programs = await seed_job(api, owner="alice", programs=4)
    await _confirm_last(api, job_id, programs[-1].id)

    view = await api.client.get(f"/api/v1/jobs/{job_id}", headers=headers)
    assert view.status_code == 200, view.text
    job = view.json()
    assert job["best_score"] == 1.1 and job["best_program_id"] == programs[-1].id
    best = job["best"]
    assert (best["picked_score"], best["confirmed_score"], best["note"]) == (1.3, 1.1, NOTE)
    assert best["spread"]["count"] == 3 and best["spread"]["low"] == 1.0
    assert job["remeasured"] == {"confirmed": 1}

    page = await api.client.get(f"/jobs/{job_id}", headers=headers)
    assert page.status_code == 200
    assert "picked at 1.3" in page.text and "n=3" in page.text
    assert "winner&#39;s curse" in page.text or "winner's curse" in page.text


async def test_a_best_never_re_measured_shows_no_confirmation(api: Api) -> None:
    headers = await api.token("bob")
    job_id, _programs = await seed_job(api, owner="bob", programs=2)
    view = await api.client.get(f"/api/v1/jobs/{job_id}", headers=headers)
    assert view.status_code == 200 and view.json()["best"] is None
    assert view.json()["remeasured"] == {}
