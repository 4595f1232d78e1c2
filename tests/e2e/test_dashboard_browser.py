"""The dashboard in a real browser: headless Chromium (Debian's, driven by Playwright) loads the job
page of a finished small run and the score chart and MAP-Elites heatmaps are drawn with data; the
KernelBench page draws a KernelBench job's row and the fast_p lines.

The screenshot lands in the test's temporary folder; with ``CODEVOLVE_DOCS_SCREENSHOT=1`` it is
also written to ``docs/dashboard.png`` (the README's picture).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import pytest
import uvicorn

from codevolve.core.config import RunConfig
from codevolve.core.job import JobState
from codevolve.core.program import Evaluation, Program, ProgramStatus, StageResult
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.services.api.app import create_app
from codevolve.services.runtime.embedded import run_embedded
from codevolve.services.settings import Settings
from tests.api.kernel_jobs import KernelJob, kernel_job

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = os.environ.get("CODEVOLVE_CHROMIUM", "/usr/bin/chromium")
DOCS = Path(__file__).resolve().parents[2] / "docs"
STARTUP_S = 30.0  # seconds
T = TypeVar("T")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def finished_run(tmp_path: Path) -> tuple[str, str]:
    """(database URL, job id) of a small gemm-tiling run that has finished."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'run.sqlite'}"
    config = RunConfig(problem="gemm-tiling", seed=1, max_proposals=40, islands=2)
    result = asyncio.run(run_embedded(db_url=url, config=config, workers=2))
    assert result.state.value == "done"
    return url, result.job_id


@pytest.fixture
def server(finished_run: tuple[str, str]) -> Iterator[str]:
    """The app (public dashboard) served by uvicorn in a thread; yields its base URL."""
    url, _ = finished_run
    port = _free_port()
    app = create_app(Settings(db=url, public_dashboard=True, admin_token=None))
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_S
    while not instance.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield base
    finally:
        instance.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def chromium() -> str:
    """The system Chromium; missing, the test is skipped, except under CI, where it fails."""
    if not Path(CHROMIUM).exists():
        message = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return CHROMIUM


@pytest.mark.slow
def test_job_page_draws_the_chart_and_the_heatmaps_with_data(
    chromium: str, server: str, finished_run: tuple[str, str], tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    _, job_id = finished_run
    expected = httpx.get(f"{server}/jobs/{job_id}/live.json", timeout=10).json()
    elites = sum(len(island["cells"]) for island in expected["islands"])
    assert expected["history"] and elites > 0

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1200})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{server}/jobs/{job_id}")
            page.wait_for_selector("body[data-rendered='true']", timeout=15_000)

            chart = page.locator("#score-chart")
            assert chart.get_attribute("data-points") == str(len(expected["history"]))
            assert chart.locator("circle.dot").count() == len(expected["history"])
            best_line = chart.locator("path.best").get_attribute("d") or ""
            assert best_line.startswith("M") and best_line.count("V") >= 1  # it rose at least once
            islands = {island for _, island, _ in expected["history"]}
            lines = len(islands) if len(islands) > 1 else 0  # one line per island, if several
            assert chart.locator("path.island").count() == lines
            box = chart.bounding_box()
            assert box is not None and box["height"] > 100

            heatmaps = page.locator(".heatmap")
            assert heatmaps.count() == len(expected["islands"])
            filled = page.locator(".heatmap rect.cell.filled")
            assert filled.count() == elites
            assert (filled.first.get_attribute("fill") or "").startswith("rgb(")
            assert page.locator("#top-table tbody tr").count() == min(10, len(expected["top"]))
            assert errors == []

            shot = tmp_path / "dashboard-job.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            if os.environ.get("CODEVOLVE_DOCS_SCREENSHOT") == "1":
                DOCS.mkdir(exist_ok=True)
                shutil.copyfile(shot, DOCS / "dashboard.png")

            _check_live_updates(page, server, finished_run[0])
            _check_kernelbench_page(page, server, finished_run[0])
        finally:
            browser.close()


def _check_live_updates(page: Page, server: str, db_url: str) -> None:
    """A running job's page redraws when a result lands, without a reload."""
    job_id, program = _off_the_loop(_running_job(db_url))
    page.goto(f"{server}/jobs/{job_id}")
    page.wait_for_selector("body[data-rendered='true']")
    assert page.locator("#score-chart").get_attribute("data-points") == "0"
    _off_the_loop(_land_result(db_url, program))
    page.wait_for_function(
        "document.querySelector('#score-chart').dataset.points === '1'", timeout=15_000
    )
    assert page.locator(".heatmap rect.cell.filled").count() == 1
    assert page.locator("#stat-best").inner_text() == "1.5000"


def _check_kernelbench_page(page: Page, server: str, db_url: str) -> None:
    """The KernelBench page (from the nav) lists a KernelBench job with its speedups and links to
    its job page; the gemm-tiling jobs of the same database are not rows."""
    job = _off_the_loop(_kernel_job(db_url))
    page.goto(server)
    page.click("nav a[href='/kernelbench']")
    page.wait_for_selector("body[data-rendered='true']")
    rows = page.locator("#results-table tbody tr")
    assert rows.count() == 1
    row = page.locator(f"#results-table tr[data-job='{job.job_id}']")
    cells = row.locator("td").all_inner_texts()
    assert cells[:7] == ["19_ReLU", "yes", "2.50×", "1.88×", "0.0160", "12.5", "triton"]
    assert page.locator(
        "#results-summary tr[data-line='fast_p_eager'] td[data-p='2.0']"
    ).inner_text() == ("1.00")
    assert page.locator(
        "#results-summary tr[data-line='fast_p_compile'] td[data-p='2.0']"
    ).inner_text() == ("0.00")
    row.locator(f"a[href='/jobs/{job.job_id}']").click()
    page.wait_for_url(f"{server}/jobs/{job.job_id}")


async def _kernel_job(db_url: str) -> KernelJob:
    engine = create_engine(db_url)
    try:
        async with session_factory(engine).begin() as session:
            return await kernel_job(session, owner="", name="19_ReLU", speedup=2.5)
    finally:
        await engine.dispose()


def _off_the_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end on a thread of its own: Playwright's sync API keeps an event
    loop running in this one."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _running_job(db_url: str) -> tuple[str, Program]:
    engine = create_engine(db_url)
    try:
        async with session_factory(engine).begin() as session:
            job = await repository.create_job(session, RunConfig(problem="gemm-tiling"))
            await repository.set_job_state(session, job.id, JobState.RUNNING)
            program = Program(
                id=uuid.uuid4().hex,
                job_id=job.id,
                source="def f():\n    return 1\n",
                content_hash=uuid.uuid4().hex,
                parent_id=None,
                island=0,
                generation=0,
                proposal_index=0,
                status=ProgramStatus.PENDING,
            )
            await repository.insert_program(session, program)
    finally:
        await engine.dispose()
    return job.id, program


async def _land_result(db_url: str, program: Program) -> None:
    engine = create_engine(db_url)
    try:
        async with session_factory(engine).begin() as session:
            stage = StageResult(stage="score", passed=True, score=1.5)
            evaluation = Evaluation(
                program_id=program.id,
                job_id=program.job_id,
                status=ProgramStatus.EVALUATED,
                stages=(stage,),
            )
            await repository.apply_evaluation(session, evaluation, cell=(2, 3))
            await repository.add_elite(
                session,
                job_id=program.job_id,
                island=0,
                cell=(2, 3),
                program_id=program.id,
                score=1.5,
                epoch=0,
            )
            await repository.update_job_best(session, program.job_id)
    finally:
        await engine.dispose()
