"""Jobs over HTTP: create with flag-named config keys, clear 422s naming the field, list, get,
pause, resume, cancel; programs paginated and filtered; best programs; health and metrics."""

from __future__ import annotations

from typing import Any

from codevolve.program_db import repository
from tests.api.conftest import Api, admin, seed_job


async def test_create_answers_201_with_a_queued_job_whose_config_maps_the_flag_names(
    api: Api,
) -> None:
    headers = await api.token("alice")
    body = {
        "problem": "gemm-tiling",
        "config": {
            "proposals": 200,
            "seed": 1,
            "islands": 2,
            "in_flight": 4,
            "max_wall_s": 60,
            "remeasure_samples": 3,
        },
    }
    response = await api.client.post("/api/v1/jobs", json=body, headers=headers)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["state"] == "queued" and job["owner"] == "alice"
    async with api.sessions() as session:
        stored = await repository.get_job(session, job["id"])
    assert stored is not None
    config = stored.config
    assert (config.max_proposals, config.seed, config.islands) == (200, 1, 2)
    assert (config.max_in_flight, config.max_wall_s, config.remeasure_samples) == (4, 60, 3)
    fetched = await api.client.get(f"/api/v1/jobs/{job['id']}", headers=headers)
    assert fetched.json()["programs"] == {"pending": 0, "evaluated": 0, "failed": 0, "rejected": 0}
    assert fetched.json()["usage"]["tokens_in"] == 0


async def _rejected(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    headers = await api.token("alice")
    response = await api.client.post("/api/v1/jobs", json=body, headers=headers)
    assert response.status_code == 422, response.text
    listed = await api.client.get("/api/v1/jobs", headers=headers)
    assert listed.json()["jobs"] == []  # nothing half-created
    detail: dict[str, Any] = response.json()["detail"][0]
    return detail


async def test_an_unknown_problem_is_a_422_listing_the_known_ones(api: Api) -> None:
    detail = await _rejected(api, {"problem": "tsp"})
    assert detail["loc"] == ["body", "problem"]
    assert "gemm-tiling" in detail["msg"]


async def test_invalid_config_values_are_422s_naming_the_field(api: Api) -> None:
    detail = await _rejected(api, {"problem": "gemm-tiling", "config": {"proposals": 0}})
    assert detail["loc"] == ["body", "config", "proposals"]
    detail = await _rejected(api, {"problem": "gemm-tiling", "config": {"in_flight": "many"}})
    assert detail["loc"] == ["body", "config", "in_flight"]
    detail = await _rejected(api, {"problem": "gemm-tiling", "config": {"proposal": 5}})
    assert detail["loc"] == ["body", "config", "proposal"]  # a typo is not silently ignored
    detail = await _rejected(api, {"problem": "gemm-tiling", "config": {"reset_interval": 9}})
    assert "reset_interval" in detail["msg"]  # a rule across fields


async def test_pause_resume_cancel_follow_the_job_states(api: Api) -> None:
    headers = await api.token("alice")
    created = await api.client.post(
        "/api/v1/jobs", json={"problem": "gemm-tiling"}, headers=headers
    )
    job = f"/api/v1/jobs/{created.json()['id']}"

    async def act(action: str) -> tuple[int, str]:
        response = await api.client.post(f"{job}/{action}", headers=headers)
        return response.status_code, response.json().get("state", response.json().get("detail"))

    assert await act("pause") == (200, "paused")
    assert (await act("pause"))[0] == 409
    assert await act("resume") == (200, "queued")
    assert await act("cancel") == (200, "cancelled")
    status, detail = await act("resume")
    assert status == 409 and "cancelled" in detail


async def test_programs_are_paginated_filtered_and_sorted(api: Api) -> None:
    headers = await api.token("alice")
    job_id, programs = await seed_job(api, owner="alice", programs=5)
    base = f"/api/v1/jobs/{job_id}/programs"

    page = (await api.client.get(f"{base}?limit=2", headers=headers)).json()
    assert [p["score"] for p in page["programs"]] == [1.4, 1.3]
    page = (await api.client.get(f"{base}?limit=2&offset=2", headers=headers)).json()
    assert [p["score"] for p in page["programs"]] == [1.2, 1.1]
    by_index = (await api.client.get(f"{base}?sort=index", headers=headers)).json()
    assert [p["id"] for p in by_index["programs"]] == [p.id for p in programs]
    island = (await api.client.get(f"{base}?island=1", headers=headers)).json()
    assert {p["island"] for p in island["programs"]} == {1} and len(island["programs"]) == 2
    failed = (await api.client.get(f"{base}?status=failed", headers=headers)).json()
    assert failed["programs"] == []
    assert (await api.client.get(f"{base}?sort=random", headers=headers)).status_code == 422
    assert (await api.client.get(f"{base}?limit=0", headers=headers)).status_code == 422

    best = (await api.client.get(f"/api/v1/jobs/{job_id}/best?limit=1", headers=headers)).json()
    assert [p["id"] for p in best] == [programs[-1].id]


async def test_a_program_carries_source_stage_metrics_artifacts_diff_and_lineage(api: Api) -> None:
    headers = await api.token("alice")
    _, programs = await seed_job(api, owner="alice", programs=3)
    child = programs[-1]
    program = (await api.client.get(f"/api/v1/programs/{child.id}", headers=headers)).json()
    assert program["source"] == child.source
    assert program["stage_scores"] == {"check": 1.0, "score": 1.2}
    assert program["artifacts"] == {"stderr": "warning: x"}
    assert program["feedback"] == "ok"
    assert "-    return 2" in program["diff_to_parent"]
    assert "+    return 3" in program["diff_to_parent"]
    assert [a["id"] for a in program["lineage"]] == [p.id for p in reversed(programs)]
    assert program["lineage"][-1]["generation"] == 0
    assert program["proposal"]["proposer"] == "llm:test-model"
    assert program["proposal"]["prompt"] == "improve <f> step 2"
    root = (await api.client.get(f"/api/v1/programs/{programs[0].id}", headers=headers)).json()
    assert root["proposal"] is None
    job = (await api.client.get(f"/api/v1/jobs/{child.job_id}", headers=headers)).json()
    assert job["usage"]["tokens_in"] == 2000 and job["usage"]["cost_usd"] == 0.5


async def test_health_metrics_and_the_embedded_fleet(api: Api) -> None:
    headers = await api.token("alice")
    await seed_job(api, owner="alice", programs=2)
    health = await api.client.get("/api/v1/health")
    assert health.status_code == 200 and health.json()["database"] == "ok"
    metrics = await api.client.get("/metrics", headers=admin())
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'codevolve_jobs{state="queued"} 1' in metrics.text
    assert 'codevolve_programs{status="evaluated"} 2' in metrics.text
    fleet = await api.client.get("/api/v1/workers", headers=headers)
    assert fleet.json() == {"mode": "embedded", "workers": []}
