"""Bearer tokens: no token 401, another owner's job 404, no upload right 403, admin-only token
management, tokens stored hashed and revocable."""

from __future__ import annotations

import hashlib

from sqlalchemy import select

from codevolve.program_db.models import ApiTokenRow
from tests.api.conftest import Api, admin, seed_job

JOB = {"problem": "gemm-tiling", "config": {"proposals": 10}}


async def test_requests_without_a_valid_token_are_401_with_a_bearer_challenge(api: Api) -> None:
    for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic eDp5"}):
        response = await api.client.get("/api/v1/jobs", headers=headers)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"] == "Bearer"
    assert (await api.client.post("/api/v1/jobs", json=JOB)).status_code == 401


async def test_another_owners_job_and_programs_are_404_and_not_listed(api: Api) -> None:
    alice, bob = await api.token("alice"), await api.token("bob")
    job_id, programs = await seed_job(api, owner="alice")

    assert (await api.client.get(f"/api/v1/jobs/{job_id}", headers=alice)).status_code == 200
    for path in (
        f"/api/v1/jobs/{job_id}",
        f"/api/v1/jobs/{job_id}/programs",
        f"/api/v1/jobs/{job_id}/best",
        f"/api/v1/programs/{programs[0].id}",
    ):
        assert (await api.client.get(path, headers=bob)).status_code == 404, path
    assert (await api.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=bob)).status_code == 404
    assert (await api.client.get("/api/v1/jobs", headers=bob)).json()["jobs"] == []
    # the admin sees every job
    listed = (await api.client.get("/api/v1/jobs", headers=admin())).json()["jobs"]
    assert [job["id"] for job in listed] == [job_id]


async def test_a_token_without_the_upload_right_cannot_upload_a_bundle(api: Api) -> None:
    reader = await api.token("carol", can_upload=False)
    files = {"initial_program.py": "eA==", "evaluator.py": "eA=="}
    response = await api.client.post("/api/v1/jobs/bundle", json={"files": files}, headers=reader)
    assert response.status_code == 403
    assert "can_upload" in response.json()["detail"]
    response = await api.client.post(
        "/api/v1/jobs", json={"problem": "bundle:" + "0" * 64}, headers=reader
    )
    assert response.status_code == 403


async def test_only_the_admin_manages_tokens(api: Api) -> None:
    user = await api.token("dave")
    assert (await api.client.get("/api/v1/tokens", headers=user)).status_code == 403
    response = await api.client.post("/api/v1/tokens", json={"owner": "eve"}, headers=user)
    assert response.status_code == 403
    assert (await api.client.get("/api/v1/tokens", headers=admin())).status_code == 200


async def test_tokens_are_stored_hashed_and_stop_working_when_revoked(api: Api) -> None:
    response = await api.client.post(
        "/api/v1/tokens", json={"owner": "frank", "can_upload": True}, headers=admin()
    )
    created = response.json()
    secret = created["token"]
    async with api.sessions() as session:
        stored = (await session.scalars(select(ApiTokenRow))).one()
    assert stored.token_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in (stored.token_hash, stored.id)
    listed = (await api.client.get("/api/v1/tokens", headers=admin())).json()["tokens"]
    assert "token" not in listed[0]

    headers = {"Authorization": f"Bearer {secret}"}
    assert (await api.client.get("/api/v1/jobs", headers=headers)).status_code == 200
    revoke = await api.client.delete(f"/api/v1/tokens/{created['id']}", headers=admin())
    assert revoke.status_code == 204
    assert (await api.client.get("/api/v1/jobs", headers=headers)).status_code == 401
    again = await api.client.delete(f"/api/v1/tokens/{created['id']}", headers=admin())
    assert again.status_code == 404


async def test_the_dashboard_needs_a_token_unless_public(api: Api) -> None:
    job_id, _ = await seed_job(api, owner="alice")
    assert (await api.client.get("/")).status_code == 401
    assert (await api.client.get(f"/jobs/{job_id}/live.json")).status_code == 401
    browser = await api.client.get("/", headers={"Accept": "text/html,*/*"})
    assert browser.status_code == 303 and browser.headers["location"] == "/login"
    assert "Sign in" in (await api.client.get("/login")).text
    assert (await api.client.post("/login", data={"token": "wrong"})).status_code == 401
    assert (await api.client.get("/")).status_code == 401
    token = (await api.token("alice"))["Authorization"].removeprefix("Bearer ")
    login = await api.client.post("/login", data={"token": token})
    assert login.status_code == 303
    page = await api.client.get(f"/jobs/{job_id}")  # the cookie set by /login
    assert page.status_code == 200
    api.client.cookies.clear()
    bob = (await api.token("bob"))["Authorization"].removeprefix("Bearer ")
    await api.client.post("/login", data={"token": bob})
    assert (await api.client.get(f"/jobs/{job_id}")).status_code == 404
