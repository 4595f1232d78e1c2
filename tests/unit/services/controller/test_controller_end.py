"""A run ends as soon as its last result is applied, not when the result read next times out."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from codevolve.core.config import RunConfig
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.services.controller import results as controller_module
from tests.unit.services.controller.controller_support import run_job

LONG_POLL_S = 30.0  # a result read that waits this long would hold the run's end back


async def test_the_run_ends_without_waiting_out_the_result_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(controller_module, "RESULT_POLL_S", LONG_POLL_S)
    config = RunConfig(problem="gemm-tiling", seed=5, max_proposals=6, max_in_flight=2)
    started = time.monotonic()
    state, counts, _controller = await run_job(tmp_path, LocalQueue(), config)
    elapsed = time.monotonic() - started
    assert state.value == "done"
    assert counts.pending == 0
    assert counts.evaluated >= 1
    assert elapsed < LONG_POLL_S / 2, f"the run took {elapsed:.1f} s"
