"""The worker fleet read from real Redis heartbeats (a key prefix of the test's own)."""

from __future__ import annotations

import httpx
from redis.asyncio import Redis

from codevolve.evaluator_workers.heartbeat import WorkerInfo, beat
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.services.api.app import create_app
from codevolve.services.api.fleet import redis_fleet
from codevolve.services.settings import Settings
from tests.api.conftest import ADMIN_TOKEN, Api, admin


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
