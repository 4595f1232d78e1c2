"""What the API shows to whom: another owner's ids answer exactly like unknown ids, /metrics
needs a token, pages never echo the Host header, and the sign-in cookie holds a session id."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from codevolve.services.api.app import create_app
from codevolve.services.api.auth import COOKIE
from codevolve.services.settings import Settings
from tests.api.conftest import ADMIN_TOKEN, Api, admin, seed_job

METRICS_TOKEN = "metrics-secret-for-tests"


async def test_another_owners_ids_answer_exactly_like_unknown_ids(api: Api) -> None:
    bob = await api.token("bob")
    job_id, programs = await seed_job(api, owner="alice")
    other_job = uuid.uuid4().hex
    routes = [
        ("/api/v1/programs/{}", programs[1].id, uuid.uuid4().hex),
        ("/programs/{}", programs[1].id, uuid.uuid4().hex),
        ("/api/v1/jobs/{}", job_id, other_job),
        ("/api/v1/jobs/{}/programs", job_id, other_job),
        ("/api/v1/jobs/{}/best", job_id, other_job),
        ("/jobs/{}", job_id, other_job),
        ("/jobs/{}/live.json", job_id, other_job),
    ]
    for route, theirs, unknown in routes:
        hidden = await api.client.get(route.format(theirs), headers=bob)
        missing = await api.client.get(route.format(unknown), headers=bob)
        assert hidden.status_code == missing.status_code == 404, route
        # the same body but for the id typed: neither the job's id nor that the id exists
        assert hidden.text.replace(theirs, "ID") == missing.text.replace(unknown, "ID"), route
        if theirs != job_id:
            assert job_id not in hidden.text, route
    for action in ("pause", "resume", "cancel"):
        hidden = await api.client.post(f"/api/v1/jobs/{job_id}/{action}", headers=bob)
        missing = await api.client.post(f"/api/v1/jobs/{other_job}/{action}", headers=bob)
        assert hidden.status_code == missing.status_code == 404
    theirs = programs[1].id
    program = await api.client.get(f"/api/v1/programs/{theirs}", headers=bob)
    assert program.json() == {"detail": f"no program {theirs}"}


async def test_metrics_need_the_metrics_or_admin_token(migrated_postgres_url: str) -> None:
    settings = Settings(
        db=migrated_postgres_url, admin_token=ADMIN_TOKEN, metrics_token=METRICS_TOKEN
    )
    async with _client(settings) as client:
        assert (await client.get("/metrics")).status_code == 401
        wrong = await client.get("/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["detail"] == "invalid metrics token"
        for token in (METRICS_TOKEN, ADMIN_TOKEN):
            answer = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 200 and "codevolve_jobs" in answer.text
    async with _client(settings.model_copy(update={"public_metrics": True})) as client:
        assert (await client.get("/metrics")).status_code == 200


async def test_a_user_token_cannot_read_metrics(api: Api) -> None:
    alice = await api.token("alice")
    assert (await api.client.get("/metrics", headers=alice)).status_code == 401
    assert (await api.client.get("/metrics", headers=admin())).status_code == 200


async def test_no_page_repeats_the_host_header(api: Api) -> None:
    job_id, programs = await seed_job(api, owner="alice")
    evil = {"Host": "evil.example"}
    pages = ["/login", "/", "/workers", f"/jobs/{job_id}", f"/programs/{programs[1].id}"]
    for path in pages:
        page = await api.client.get(path, headers={**admin(), **evil})
        assert page.status_code == 200, path
        assert "evil.example" not in page.text, path
        assert 'src="/static/dashboard.js"' in page.text
    redirect = await api.client.get("/", headers={**evil, "Accept": "text/html"})
    assert redirect.headers["location"] == "/login"


async def _sign_in(api: Api, token: str, **headers: str) -> httpx.Response:
    response = await api.client.post("/login", data={"token": token}, headers=headers)
    assert response.status_code == 303
    return response


async def test_the_sign_in_cookie_holds_a_session_id_not_the_token(api: Api) -> None:
    job_id, _ = await seed_job(api, owner="alice")
    token = (await api.token("alice"))["Authorization"].removeprefix("Bearer ")
    login = await _sign_in(api, token)
    cookie = login.headers["set-cookie"]
    assert token not in cookie
    attributes = {part.strip().lower() for part in cookie.split(";")}
    assert {"httponly", "samesite=strict"} <= attributes
    assert "secure" not in attributes  # plain http, no trusted proxy
    assert (await api.client.get(f"/jobs/{job_id}")).status_code == 200
    assert "Sign out" in (await api.client.get("/")).text

    session_id = api.client.cookies[COOKIE]
    logout = await api.client.post("/logout")
    assert logout.status_code == 303 and logout.headers["location"] == "/login"
    assert (
        f"{COOKIE}=" in logout.headers["set-cookie"] and "Max-Age=0" in logout.headers["set-cookie"]
    )
    # the old session id no longer works, even if a browser kept it
    api.client.cookies.set(COOKIE, session_id)
    assert (await api.client.get(f"/jobs/{job_id}")).status_code == 401
    api.client.cookies.set(COOKIE, token)  # nor does the raw token in the cookie
    assert (await api.client.get(f"/jobs/{job_id}")).status_code == 401


async def test_revoking_the_token_ends_its_sign_ins(api: Api) -> None:
    created = await api.client.post("/api/v1/tokens", json={"owner": "alice"}, headers=admin())
    await _sign_in(api, created.json()["token"])
    assert (await api.client.get("/")).status_code == 200
    await api.client.delete(f"/api/v1/tokens/{created.json()['id']}", headers=admin())
    assert (await api.client.get("/")).status_code == 401


@pytest.mark.parametrize(
    ("trust", "headers", "secure"),
    [
        (False, {"X-Forwarded-Proto": "https"}, False),  # anyone can send the header
        (True, {"X-Forwarded-Proto": "https"}, True),
        (True, {"X-Forwarded-Proto": "http"}, False),
    ],
)
async def test_the_cookie_is_secure_over_https_and_behind_a_trusted_proxy(
    migrated_postgres_url: str, trust: bool, headers: dict[str, str], secure: bool
) -> None:
    settings = Settings(
        db=migrated_postgres_url, admin_token=ADMIN_TOKEN, trust_proxy_headers=trust
    )
    async with _client(settings) as client:
        login = await client.post("/login", data={"token": ADMIN_TOKEN}, headers=headers)
    attributes = {p.strip().lower() for p in login.headers["set-cookie"].split(";")}
    assert ("secure" in attributes) is secure


async def test_a_cookie_set_over_https_is_secure(migrated_postgres_url: str) -> None:
    settings = Settings(db=migrated_postgres_url, admin_token=ADMIN_TOKEN)
    async with _client(settings, base_url="https://test") as client:
        login = await client.post("/login", data={"token": ADMIN_TOKEN})
    assert "secure" in {p.strip().lower() for p in login.headers["set-cookie"].split(";")}


@asynccontextmanager
async def _client(
    settings: Settings, base_url: str = "http://test"
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app with its own lifespan (engine, migrations) running."""
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url=base_url) as client,
    ):
        yield client
