"""``GET /api/v1/kernelbench`` and the dashboard's KernelBench page: one row per KernelBench
problem the caller may see (its newest job; the jobs list's ownership rule), fast_p over those
rows, no other problem's job, and a stored kernel bundle that cannot be read leaves its job out
instead of failing."""

from __future__ import annotations

import json
import re

import pytest

from codevolve.core.config import RunConfig
from codevolve.problems.openevolve import make_bundle
from codevolve.problems.openevolve.bundle import bundle_id
from codevolve.program_db import repository
from codevolve.program_db.bundles import BUNDLE_PROBLEM_PREFIX
from tests.api.conftest import Api, admin, seed_job
from tests.api.kernel_jobs import (
    COMPILE_MS,
    COMPILE_NOTE,
    COMPILE_SECONDS,
    EAGER_MS,
    RELU,
    kernel_job,
)
from tests.api.test_bundles_api import CONFIG, EVALUATOR, INITIAL


async def _openevolve_bundle_job(api: Api, *, owner: str) -> str:
    files = {"initial_program.py": INITIAL, "evaluator.py": EVALUATOR, "config.yaml": CONFIG}
    bundle = make_bundle(files)
    async with api.sessions.begin() as session:
        await repository.store_bundle(session, identity=bundle.id, owner=owner, files=files)
        config = RunConfig(problem=BUNDLE_PROBLEM_PREFIX + bundle.id, max_proposals=5)
        job = await repository.create_job(session, config, owner=owner)
    return job.id


async def test_a_kernelbench_job_is_a_row_and_other_problems_jobs_are_not(api: Api) -> None:
    alice = await api.token("alice")
    async with api.sessions.begin() as session:
        fast = await kernel_job(session, owner="alice", name="19_ReLU", speedup=2.5)
    gemm_job, _ = await seed_job(api, owner="alice", programs=2)
    openevolve_job = await _openevolve_bundle_job(api, owner="alice")

    answer = await api.client.get("/api/v1/kernelbench", headers=alice)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [row["job_id"] for row in body["rows"]] == [fast.job_id]
    assert gemm_job not in answer.text and openevolve_job not in answer.text
    row = body["rows"][0]
    assert row["problem"] == "19_ReLU" and row["state"] == "done"
    assert row["correct"] and not row["is_reference"] and row["uses_triton"]
    assert row["speedup_eager"] == pytest.approx(2.5)
    assert row["speedup_compile"] == pytest.approx(2.5 * COMPILE_MS / EAGER_MS)
    assert row["best_ms"] == pytest.approx(EAGER_MS / 2.5)
    assert row["best_program_id"] == fast.best_program_id
    assert row["compile_seconds"] == COMPILE_SECONDS and not row["compile_cached"]
    assert not row["compile_failed"] and row["compile_note"] == ""
    summary = body["summary"]
    assert (summary["problems"], summary["correct"], summary["kept_reference"]) == (1, 1, 0)
    assert summary["fast_p_eager"] == {"0.0": 1.0, "1.0": 1.0, "1.5": 1.0, "2.0": 1.0}
    assert summary["fast_p_compile"] == {"0.0": 1.0, "1.0": 1.0, "1.5": 1.0, "2.0": 0.0}


async def test_a_problem_run_twice_is_one_row_its_newest_job(api: Api) -> None:
    """fast_p counts problems: a re-run (say with a larger budget) replaces the older row."""
    alice = await api.token("alice")
    async with api.sessions.begin() as session:
        await kernel_job(session, owner="alice", name="19_ReLU")  # kept the reference
    async with api.sessions.begin() as session:
        again = await kernel_job(session, owner="alice", name="19_ReLU", speedup=2.5)
    body = (await api.client.get("/api/v1/kernelbench", headers=alice)).json()
    assert [row["job_id"] for row in body["rows"]] == [again.job_id]
    assert body["summary"]["problems"] == 1
    assert body["summary"]["fast_p_eager"]["1.0"] == 1.0


async def test_another_owners_kernelbench_job_is_not_listed_but_the_admin_sees_all(
    api: Api,
) -> None:
    alice, bob = await api.token("alice"), await api.token("bob")
    async with api.sessions.begin() as session:
        mine = await kernel_job(session, owner="alice", name="19_ReLU", speedup=2.5)
        theirs = await kernel_job(session, owner="bob", name="20_LeakyReLU")

    for headers, expected in ((alice, [mine]), (bob, [theirs]), (admin(), [theirs, mine])):
        body = (await api.client.get("/api/v1/kernelbench", headers=headers)).json()
        assert [row["job_id"] for row in body["rows"]] == [job.job_id for job in expected]
    as_bob = (await api.client.get("/api/v1/kernelbench", headers=bob)).json()
    assert mine.job_id not in json.dumps(as_bob)
    # bob's best is the reference's own code: correct (fast_0) and never counted as faster
    assert as_bob["rows"][0]["is_reference"] and as_bob["rows"][0]["speedup_eager"] == 1.0
    assert as_bob["summary"]["fast_p_eager"] == {"0.0": 1.0, "1.0": 0.0, "1.5": 0.0, "2.0": 0.0}
    assert as_bob["summary"]["kept_reference"] == 1


async def test_without_a_token_it_is_401_and_with_no_kernel_job_the_table_is_empty(
    api: Api,
) -> None:
    assert (await api.client.get("/api/v1/kernelbench")).status_code == 401
    body = (await api.client.get("/api/v1/kernelbench", headers=await api.token("carol"))).json()
    assert body["rows"] == [] and body["summary"]["problems"] == 0
    assert body["summary"]["fast_p_eager"]["1.0"] is None  # no problem: no share


async def test_an_unreadable_kernel_bundle_leaves_its_job_out_of_the_table(api: Api) -> None:
    alice = await api.token("alice")
    files = {
        "initial_program.py": INITIAL,
        "reference.py": RELU.encode(),
        "kernelbench.json": b"{}\n",  # no name, no settings: not a kernel problem's spec
    }
    # Stored as a row from before bundles were checked: make_bundle refuses such files now.
    broken = bundle_id(files)
    async with api.sessions.begin() as session:
        await repository.store_bundle(session, identity=broken, owner="alice", files=files)
        config = RunConfig(problem=BUNDLE_PROBLEM_PREFIX + broken, max_proposals=5)
        await repository.create_job(session, config, owner="alice")
        good = await kernel_job(session, owner="alice", name="19_ReLU", speedup=2.5)
    answer = await api.client.get("/api/v1/kernelbench", headers=alice)
    assert answer.status_code == 200, answer.text
    assert [row["job_id"] for row in answer.json()["rows"]] == [good.job_id]


async def test_the_dashboard_page_shows_the_same_table_for_the_same_viewer(api: Api) -> None:
    alice = await api.token("alice")
    async with api.sessions.begin() as session:
        mine = await kernel_job(session, owner="alice", name="19_ReLU", speedup=2.5)
        await kernel_job(session, owner="bob", name="20_LeakyReLU")
    expected = (await api.client.get("/api/v1/kernelbench", headers=alice)).json()

    page = await api.client.get("/kernelbench", headers=alice)
    assert page.status_code == 200
    assert '<a href="/kernelbench" class="active">KernelBench</a>' in page.text
    match = re.search(
        r'<script type="application/json" id="results-data">(.*?)</script>', page.text
    )
    assert match is not None
    assert json.loads(match.group(1)) == expected
    assert [row["job_id"] for row in expected["rows"]] == [mine.job_id]
    live = await api.client.get("/live/kernelbench.json", headers=alice)
    assert live.json() == expected
    assert (await api.client.get("/live/kernelbench.json")).status_code == 401


async def test_compile_seconds_and_a_failed_compile_baseline_are_shown_and_counted(
    api: Api,
) -> None:
    """A reference torch.compile cannot compile says why and counts against compile as not
    faster: fast_p against compile keeps it in the denominator."""
    alice = await api.token("alice")
    async with api.sessions.begin() as session:
        await kernel_job(session, owner="alice", name="19_ReLU", speedup=2.5, compiled="cached")
        failed = await kernel_job(
            session, owner="alice", name="20_LeakyReLU", speedup=3.0, compiled="failed"
        )
    body = (await api.client.get("/api/v1/kernelbench", headers=alice)).json()
    rows = {row["problem"]: row for row in body["rows"]}
    assert rows["19_ReLU"]["compile_cached"] and rows["19_ReLU"]["compile_seconds"] == 12.5
    broken = rows["20_LeakyReLU"]
    assert broken["job_id"] == failed.job_id and broken["compile_failed"]
    assert broken["compile_note"] == COMPILE_NOTE and broken["speedup_compile"] is None
    assert broken["speedup_eager"] == pytest.approx(3.0)  # judged against eager all the same
    summary = body["summary"]
    assert summary["compile_failed"] == 1 and summary["compile_cached"] == 1
    assert summary["compile_seconds"] == COMPILE_SECONDS
    assert summary["fast_p_eager"]["2.0"] == 1.0
    assert summary["fast_p_compile"] == {"0.0": 1.0, "1.0": 0.5, "1.5": 0.5, "2.0": 0.0}

    page = await api.client.get("/kernelbench", headers=alice)
    match = re.search(
        r'<script type="application/json" id="results-layout">(.*?)</script>', page.text
    )
    assert match is not None
    columns = {c["field"]: c for c in json.loads(match.group(1))["columns"]}
    assert columns["compile_seconds"]["flag"] == "compile_cached"
    assert columns["speedup_compile"]["flag"] == "compile_failed"
    assert '<th class="num">Compile s</th>' in page.text
    lines = json.loads(match.group(1))["grid"]["lines"]
    assert ["fast_p_compile", "torch.compile"] in lines
