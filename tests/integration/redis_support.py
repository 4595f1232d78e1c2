"""Redis for tests: a key prefix per test on the shared server, or a private server to restart.

The shared server (``CODEVOLVE_TEST_REDIS``, default ``redis://127.0.0.1:6379/0``) is never flushed:
each test works under its own prefix and deletes its keys afterwards. A test that restarts Redis
starts a ``redis-server`` of its own on a free port, without persistence, so a restart comes back
empty.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis as redis_sync
from redis.asyncio import Redis

from codevolve.evaluator_workers.redis_keys import RedisKeys

REDIS_URL = os.environ.get("CODEVOLVE_TEST_REDIS", "redis://127.0.0.1:6379/0")
START_TIMEOUT_S = 10.0  # seconds a private redis-server may take to accept connections


def _reachable(url: str) -> str | None:
    try:
        redis_sync.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis_sync.RedisError as error:
        return f"{type(error).__name__}: {error}"
    return None


def delete_prefix(url: str, prefix: str) -> None:
    client = redis_sync.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def redis_url() -> str:
    error = _reachable(REDIS_URL)
    if error is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Redis at {REDIS_URL} unreachable ({error})")
        pytest.skip(f"Redis at {REDIS_URL} unreachable ({error})")
    return REDIS_URL


@pytest.fixture
def keys(redis_url: str) -> Iterator[RedisKeys]:
    """A key prefix of the test's own; its keys are deleted afterwards."""
    prefix = f"cvtest-{uuid.uuid4().hex[:12]}"
    try:
        yield RedisKeys(prefix)
    finally:
        delete_prefix(redis_url, prefix)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateRedis:
    """A ``redis-server`` of the test's own, on a free port, that can be stopped and restarted."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        self._binary = binary
        self._directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [self._binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self._directory)]
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while _reachable(self.url) is not None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()
