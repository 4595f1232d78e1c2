"""The worker fleet read from real Redis heartbeats (a key prefix of the test's own)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from codevolve.core.job import JobState
from codevolve.evaluator_workers.heartbeat import WorkerInfo, beat, describe_host
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.services.api.app import create_app
from codevolve.services.api.fleet import redis_fleet
from codevolve.services.settings import Settings
from tests.api.conftest import ADMIN_TOKEN, REDIS_URL, STARTUP_S, Api, admin, seed_job


async def test_workers_that_beat_are_listed_with_their_capabilities(
    redis: tuple[Redis, RedisKeys], migrated_sqlite_url: str
) -> None:
    client, keys = redis
    info = WorkerInfo(
        name="gpu-box-1",
        capability="gpu",
        concurrency=4,
        cpus=16,
        backends=("python", "triton"),
        gpu_model="NVIDIA H200",
        host="box",
    )
    await beat(client, keys, info, busy=3, interval_s=5.0)
    settings = Settings(db=migrated_sqlite_url, admin_token=ADMIN_TOKEN)
    app = create_app(settings, fleet=redis_fleet(client, keys))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://test") as http,
    ):
        fleet = (await http.get("/api/v1/workers", headers=admin())).json()
        page = await http.get("/workers", headers=admin())
        metrics = await http.get("/metrics", headers=admin())
    assert fleet["mode"] == "distributed"
    (worker,) = fleet["workers"]
    assert worker["name"] == "gpu-box-1" and worker["busy"] == 3 and worker["concurrency"] == 4
    assert worker["capabilities"] == ["gpu", "python", "triton"]
    assert worker["gpu_model"] == "NVIDIA H200" and worker["last_seen"] is not None
    assert "gpu-box-1" in page.text and "NVIDIA H200" in page.text
    assert "codevolve_workers 1" in metrics.text


def _worker(name: str, capability: str) -> WorkerInfo:
    return WorkerInfo(
        name=name,
        capability=capability,
        concurrency=1,
        cpus=1,
        backends=(),
        gpu_model=None,
        host="h",
    )


async def test_a_gpu_job_is_refused_while_no_live_worker_has_a_gpu(
    redis: tuple[Redis, RedisKeys], migrated_postgres_url: str
) -> None:
    client, keys = redis
    await beat(client, keys, _worker("cpu-1", "cpu"), busy=0, interval_s=5.0)
    settings = Settings(db=migrated_postgres_url, admin_token=ADMIN_TOKEN)
    app = create_app(settings, fleet=redis_fleet(client, keys))
    transport = httpx.ASGITransport(app=app)
    gpu_job = {"problem": "gemm-tiling-gpu", "config": {"proposals": 5}}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://test") as http,
    ):
        refused = await http.post("/api/v1/jobs", json=gpu_job, headers=admin())
        assert refused.status_code == 409
        detail = refused.json()["detail"]
        assert "gemm-tiling-gpu" in detail and "'gpu'" in detail
        assert "codevolve worker --capability gpu" in detail
        assert (await http.get("/api/v1/jobs", headers=admin())).json()["jobs"] == []
        cpu_job = {"problem": "gemm-tiling", "config": {"proposals": 5}}
        assert (await http.post("/api/v1/jobs", json=cpu_job, headers=admin())).status_code == 201

        await beat(client, keys, _worker("gpu-1", "gpu"), busy=0, interval_s=5.0)
        accepted = await http.post("/api/v1/jobs", json=gpu_job, headers=admin())
        assert accepted.status_code == 201, accepted.text


async def test_an_embedded_server_accepts_a_gpu_job(api: Api) -> None:
    body = {"problem": "gemm-tiling-gpu", "config": {"proposals": 5}}
    assert (await api.client.post("/api/v1/jobs", json=body, headers=admin())).status_code == 201


# ------------------------------------------------------------------ the reader `serve` wires in


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _serve_and_get(command: list[str], path: str, *, port: int, log: Path) -> httpx.Response:
    """Start ``codevolve serve``, GET ``path`` once it answers, stop it."""
    env = os.environ | {"CODEVOLVE_ADMIN_TOKEN": ADMIN_TOKEN}
    with log.open("wb") as output:
        serve = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + STARTUP_S
    try:
        while True:
            try:
                return httpx.get(f"http://127.0.0.1:{port}{path}", headers=admin(), timeout=5.0)
            except httpx.TransportError:
                assert serve.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "serve did not answer"
                time.sleep(0.2)
    finally:
        serve.terminate()
        serve.wait(timeout=20)


async def test_serve_lists_a_beating_workers_concurrency_host_and_gpu(
    redis: tuple[Redis, RedisKeys], migrated_sqlite_url: str, tmp_path: Path
) -> None:
    """Through the real ``codevolve serve --redis``: its API reads the fleet with the one reader,
    the heartbeat's fields at the level the worker's heartbeat code writes them."""
    client, keys = redis
    info = replace(
        describe_host(name="box-1", capability="gpu", concurrency=3), gpu_model="NVIDIA H200"
    )
    await beat(client, keys, info, busy=1, interval_s=30.0)
    port = _free_port()
    command = [sys.executable, "-m", "codevolve.services.cli", "serve"]
    command += ["--db", migrated_sqlite_url, "--redis", REDIS_URL, "--key-prefix", keys.prefix]
    command += ["--port", str(port), "--poll-s", "5"]
    answer = await asyncio.to_thread(
        _serve_and_get, command, "/api/v1/workers", port=port, log=tmp_path / "serve.log"
    )
    assert answer.status_code == 200, answer.text
    (worker,) = answer.json()["workers"]
    assert worker["concurrency"] == 3 and worker["busy"] == 1
    assert worker["host"] == os.uname().nodename != ""
    assert worker["capabilities"][:2] == ["gpu", "python"]
    assert worker["gpu_model"] == "NVIDIA H200" and worker["last_seen"] is not None


# ---------------------------------------------------------------------------- Redis unreachable


@pytest.fixture
async def fleet_down(migrated_postgres_url: str) -> AsyncIterator[tuple[Api, int]]:
    """The API of a distributed server whose Redis (a URL with a password) does not answer."""
    port = _free_port()  # nothing listens there
    down = Redis.from_url(f"redis://:hunter2-secret@127.0.0.1:{port}/3", decode_responses=True)
    engine = create_engine(migrated_postgres_url)
    sessions = session_factory(engine)
    settings = Settings(db=migrated_postgres_url, admin_token=ADMIN_TOKEN)
    app = create_app(settings, sessions=sessions, fleet=redis_fleet(down, RedisKeys("down")))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield Api(client=http, sessions=sessions), port
    finally:
        await engine.dispose()
        await down.aclose()


async def test_workers_answer_503_naming_redis_without_its_password(
    fleet_down: tuple[Api, int],
) -> None:
    api, port = fleet_down
    answer = await api.client.get("/api/v1/workers", headers=admin())
    assert answer.status_code == 503
    detail = answer.json()["detail"]
    assert detail.startswith(f"the worker fleet is unreachable: Redis at 127.0.0.1:{port}/3 (")
    assert "hunter2" not in answer.text
    metrics = await api.client.get("/metrics", headers=admin())
    assert metrics.status_code == 200 and "\ncodevolve_workers " not in metrics.text


async def test_the_dashboard_shows_an_unreachable_fleet_as_a_banner(
    fleet_down: tuple[Api, int],
) -> None:
    api, port = fleet_down
    page = await api.client.get("/workers", headers=admin())
    assert page.status_code == 200
    assert 'id="fleet-banner"' in page.text and f"Redis at 127.0.0.1:{port}/3" in page.text
    assert "No worker has sent a heartbeat" not in page.text and "hunter2" not in page.text

    job_id, _ = await seed_job(api, owner="ann")
    async with api.sessions.begin() as session:
        await repository.set_job_state(session, job_id, JobState.RUNNING)
    live = (await api.client.get(f"/jobs/{job_id}/live.json", headers=admin())).json()
    assert live["fleet_unreachable"].startswith("the worker fleet is unreachable: Redis at")
    job_page = await api.client.get(f"/jobs/{job_id}", headers=admin())
    banner = job_page.text.split('id="fleet-banner"')[1].split("</div>")[0]
    assert "hidden" not in banner.split(">")[0] and "unreachable: Redis at" in banner

    async with api.sessions.begin() as session:  # a finished job no longer waits for workers
        await repository.set_job_state(session, job_id, JobState.DONE)
    live = (await api.client.get(f"/jobs/{job_id}/live.json", headers=admin())).json()
    assert live["fleet_unreachable"] is None


async def test_a_gpu_job_waits_for_redis_with_a_503(fleet_down: tuple[Api, int]) -> None:
    api, _ = fleet_down
    gpu_job = {"problem": "gemm-tiling-gpu", "config": {"proposals": 5}}
    refused = await api.client.post("/api/v1/jobs", json=gpu_job, headers=admin())
    assert refused.status_code == 503
    assert refused.json()["detail"].startswith("the worker fleet is unreachable: Redis at")
    cpu_job = {"problem": "gemm-tiling", "config": {"proposals": 5}}  # queued: no GPU needed
    assert (await api.client.post("/api/v1/jobs", json=cpu_job, headers=admin())).status_code == 201
