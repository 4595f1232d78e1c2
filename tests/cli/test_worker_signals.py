"""``codevolve worker`` against a Redis that never answers still stops at once on Ctrl-C or
SIGTERM: one line naming the signal and the Redis address, exit 130 or 143 (as ``run``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

STOPS_WITHIN_S = 5.0  # seconds from the signal to the exit


def _closed_port() -> int:
    """A local port nothing listens on (bound to find it free, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("number", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_worker_waiting_for_redis_stops_on_a_signal(number: signal.Signals, code: int) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "codevolve.services.cli", "worker", "--redis", f"redis://{address}"],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert worker.stderr is not None
        for line in worker.stderr:  # it is in its retry loop once it says so
            if "redis unreachable" in line:
                break
        else:
            pytest.fail(f"the worker ended before it retried: {worker.wait()}")
        sent = time.monotonic()
        os.killpg(worker.pid, number)  # the whole group, as a terminal's Ctrl-C
        rest = worker.communicate(timeout=30)[1]
        took = time.monotonic() - sent
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    assert worker.returncode == code, rest
    assert took < STOPS_WITHIN_S
    assert "Traceback" not in rest
    last = rest.strip().splitlines()[-1]
    assert last == (
        f"interrupted ({number.name}): the worker stopped before Redis at {address} answered; "
        "check that Redis runs there and --redis is right"
    )
