"""A running job's wall time grows while it runs: the controller stores it every few seconds,
so the API and the dashboard show it without knowing when the run began."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from codevolve.core.config import RunConfig
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.program_db import repository
from codevolve.services.controller import loop
from codevolve.services.controller.loop import Controller
from codevolve.services.runtime.embedded import make_proposer
from codevolve.services.runtime.problems import cached_problem
from tests.api.conftest import Api, admin

SAVE_S = 0.2  # seconds between stores of the wall time, shortened for the test
WAIT_S = 20.0  # seconds the test waits at most for a figure


async def _running_wall(api: Api, job_id: str, *, above: float) -> float:
    """The job's wall time as the API shows it, once it is above ``above`` (the job running)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        job = (await api.client.get(f"/api/v1/jobs/{job_id}", headers=admin())).json()
        if job["state"] == "running" and job["wall_s"] > above:
            return float(job["wall_s"])
        assert time.monotonic() < deadline, f"wall time stuck at {job['wall_s']} ({job['state']})"
        await asyncio.sleep(SAVE_S / 2)


async def test_a_running_jobs_wall_time_grows_in_the_api_and_the_dashboard(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "CONTROL_POLL_S", SAVE_S)
    monkeypatch.setattr(loop, "WALL_SAVE_S", SAVE_S)
    config = RunConfig(problem="gemm-tiling", max_proposals=50, max_in_flight=2)
    async with api.sessions.begin() as session:
        job = await repository.create_job(session, config, owner="ann")
    problem = cached_problem(config.problem)
    controller = Controller(  # no worker takes its tasks: the job keeps running
        job,
        sessions=api.sessions,
        queue=LocalQueue(),
        problem=problem,
        proposer=make_proposer(config, problem),
    )
    run = asyncio.create_task(controller.run())
    try:
        first = await _running_wall(api, job.id, above=0.0)
        later = await _running_wall(api, job.id, above=first)
        assert later > first > 0.0
        live = (await api.client.get(f"/jobs/{job.id}/live.json", headers=admin())).json()
        assert live["job"]["state"] == "running" and live["job"]["wall_s"] >= later
    finally:
        cancelled = await api.client.post(f"/api/v1/jobs/{job.id}/cancel", headers=admin())
        assert cancelled.status_code == 200, cancelled.text
        run.cancel()  # its tasks would never be evaluated: the run would wait for them forever
        with contextlib.suppress(asyncio.CancelledError):
            await run
    ended = (await api.client.get(f"/api/v1/jobs/{job.id}", headers=admin())).json()
    assert ended["state"] == "cancelled" and ended["wall_s"] >= later
