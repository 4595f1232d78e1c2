"""``codevolve serve`` as a real process: the controllers in serve's own process, the API in a
child (runtime/server.py). It answers ``/health`` while running; SIGTERM, or Ctrl-C at the
terminal, ends every process it started; a part that dies stops the rest with exit code 1; the
API of a serve that was killed stops by itself. On Postgres and Redis (a key prefix of its own).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from codevolve.evaluator_workers.redis_keys import RedisKeys

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)"),
]

StartServe = Callable[..., "Serve"]
START_TIMEOUT_S = 90.0  # seconds for /health to answer: two interpreters start on a loaded machine
END_TIMEOUT_S = 30.0  # seconds for processes to end once told to


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int, cmdline: str) -> bool:
    """Still running (not a zombie) and still the same program (pids are reused)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and _cmdline(pid) == cmdline


def _descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid``, with its command line."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (parent := _parent_of(int(entry.name))) is not None:
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = {}, list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found[child] = _cmdline(child)
        todo += children.get(child, [])
    return found


@dataclass
class Serve:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def api_processes(self) -> dict[int, str]:
        below = _descendants(self.process.pid)
        return {
            pid: line
            for pid, line in below.items()
            if "--role api" in line and _parent_of(pid) == self.process.pid
        }

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"serve exited early:\n{self.output()}"
            try:
                answer = httpx.get(f"http://127.0.0.1:{self.port}/api/v1/health", timeout=5)
                if answer.status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"no /health in {START_TIMEOUT_S} s:\n{self.output()}")

    def wait(self) -> int:
        return self.process.wait(timeout=END_TIMEOUT_S)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def start_serve(
    migrated_postgres_url: str, redis_url: str, keys: RedisKeys, tmp_path: Path
) -> Iterator[StartServe]:
    started: list[Serve] = []

    def start(*more: str) -> Serve:
        port = _free_port()
        log = tmp_path / f"serve-{len(started)}.log"
        command = [sys.executable, "-m", "codevolve.services.cli", "--log-level", "INFO"]
        command += ["serve", "--db", migrated_postgres_url, "--redis", redis_url]
        command += ["--port", str(port), "--key-prefix", keys.prefix, "--poll-s", "0.3", *more]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODEVOLVE_")}
        with log.open("wb") as out:
            # A session of its own, as a terminal would start it: Ctrl-C is a SIGINT to its group.
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        serve = Serve(process, port, log)
        started.append(serve)
        return serve

    yield start
    for serve in started:  # whatever a failed test left running
        leftovers = _descendants(serve.process.pid)
        if serve.process.poll() is None:
            serve.process.kill()
            serve.process.wait()
        for pid, line in leftovers.items():
            if _alive(pid, line):
                os.kill(pid, signal.SIGKILL)


def _end_all(pids: dict[int, str]) -> list[str]:
    """Waits up to END_TIMEOUT_S for the processes to end; the command lines of those left."""
    deadline = time.monotonic() + END_TIMEOUT_S
    while (left := [line for pid, line in pids.items() if _alive(pid, line)]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    return left


@pytest.mark.parametrize(
    ("stop", "api_processes"),
    [("SIGTERM to serve", 1), ("Ctrl-C: SIGINT to its process group", 2)],
)
def test_serve_answers_health_from_api_processes_of_its_own_and_a_stop_ends_them_all(
    start_serve: StartServe, stop: str, api_processes: int
) -> None:
    serve = start_serve("--api-processes", str(api_processes))
    serve.wait_healthy()
    api = serve.api_processes()
    assert len(api) == api_processes, (api, serve.output())
    everything = _descendants(serve.process.pid)
    if stop.startswith("SIGTERM"):
        serve.process.send_signal(signal.SIGTERM)
    else:
        os.killpg(serve.process.pid, signal.SIGINT)
    assert serve.wait() == 0, serve.output()
    assert _end_all(everything) == [], serve.output()
    assert "Traceback" not in serve.output()


def test_serve_hands_its_read_cache_time_to_each_api_process(start_serve: StartServe) -> None:
    serve = start_serve("--api-processes", "2", "--read-cache-s", "0")
    serve.wait_healthy()
    lines = list(serve.api_processes().values())
    assert len(lines) == 2 and all("--read-cache-s 0.0" in line for line in lines), lines
    serve.process.send_signal(signal.SIGTERM)
    assert serve.wait() == 0, serve.output()


def test_an_api_process_that_dies_stops_serve_with_exit_code_1(start_serve: StartServe) -> None:
    serve = start_serve()
    serve.wait_healthy()
    ((api_pid, _line),) = serve.api_processes().items()
    everything = _descendants(serve.process.pid)
    os.kill(api_pid, signal.SIGKILL)
    assert serve.wait() == 1, serve.output()
    assert "the API process was killed by SIGKILL; the server stops" in serve.output()
    assert _end_all(everything) == []


def test_the_api_process_of_a_killed_serve_stops_by_itself(start_serve: StartServe) -> None:
    serve = start_serve()
    serve.wait_healthy()
    api = serve.api_processes()
    assert len(api) == 1, serve.output()
    serve.process.kill()  # no chance to stop its child
    serve.process.wait()
    assert _end_all(api) == [], serve.output()
    assert "is gone; this process stops" in serve.output()


def test_a_port_in_use_is_one_line_and_nothing_starts(start_serve: StartServe) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        serve = start_serve("--port", str(port))  # the last --port wins
        assert serve.wait() == 2
    (line,) = serve.output().strip().splitlines()
    assert line.startswith(f"error: --host 127.0.0.1 --port {port}: cannot listen there: ")
    assert "Address already in use" in line
    assert "Traceback" not in serve.output()
