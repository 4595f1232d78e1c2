"""A pool of warm fork servers that run candidates' entry points in sandboxed child processes.

Each server (see :mod:`codevolve.evaluator_workers._forkserver`) is a fresh interpreter started
with a scrubbed environment in a session of its own; it forks one child per call, so a call costs
a fork, not an interpreter start. A server serves one caller at a time; callers on other threads
wait for an idle one. A server that dies or stops answering is killed and started again on its next
use, and the call that saw it reports a crash.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NoReturn, Self, cast

from codevolve.core.config import SandboxLimits
from codevolve.core.problem import JSONValue, SandboxErrorKind, SandboxReply
from codevolve.evaluator_workers.errors import SandboxUnavailable

log = logging.getLogger(__name__)

HEADER_BYTES = 4  # big-endian length before each JSON message, as in _forkserver
START_TIMEOUT_S = 30.0  # seconds for a new server to say it is ready
STOP_TIMEOUT_S = 2.0  # seconds a server gets to exit after its input is closed
# As root, each server's candidates run as a uid of their own, so that they cannot signal the
# children of other servers: 61184 + 64 * (pid % 64) + index, below nobody's 65534.
SANDBOX_UID_BASE = 61184
SANDBOX_UIDS_PER_POOL = 64
SERVER_MODULE = "codevolve.evaluator_workers._forkserver"
SERVER_SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"  # PATH of the servers


@dataclass(frozen=True, slots=True)
class Isolation:
    """What the servers could set up beyond rlimits, a fresh temp dir and a scrubbed environment."""

    unprivileged: bool  # candidates run as an unprivileged uid (the worker runs as root)
    no_network: bool  # candidates live in an empty network namespace
    private_ipc: bool  # System V IPC in a namespace of the server's own, emptied after each call
    private_shm: bool  # a /dev/shm of the server's own (POSIX semaphores), emptied after each call
    subreaper: bool  # descendants that leave the child's process group are killed too
    landlock: bool  # writes only in the call dir, no reads of others' /proc or files, no TCP
    seccomp: bool  # socket(), ptrace, namespaces, io_uring and the like fail with EPERM


LAYERS = frozenset(field.name for field in dataclasses.fields(Isolation))


class SandboxPool:
    """``size`` fork servers; :meth:`call` is synchronous and thread-safe.

    ``reply_grace_s``: seconds past a call's wall limit after which its server counts as hung, is
    killed and the call reports a crash. A server enforces the wall limit itself; this is the
    backstop that keeps a broken server from holding a caller.

    ``disabled``: names of :class:`Isolation` layers not to set up. Production leaves it empty;
    tests use it to run the fallbacks of machines that lack a layer (no root, an old kernel).
    """

    def __init__(
        self, size: int, *, reply_grace_s: float = 5.0, disabled: Collection[str] = ()
    ) -> None:
        if size < 1:
            raise ValueError(f"a sandbox pool needs at least one server, not {size}")
        unknown = set(disabled) - LAYERS
        if unknown:
            raise ValueError(f"unknown isolation layers {sorted(unknown)}; known: {sorted(LAYERS)}")
        self._reply_grace_s = reply_grace_s
        self._disabled = frozenset(disabled)
        self._servers = [
            _Server(index, disabled=",".join(sorted(disabled))) for index in range(size)
        ]
        self._idle: queue.SimpleQueue[_Server] = queue.SimpleQueue()
        self._started = False
        self._closed = False

    def start(self) -> None:
        """Start every server and wait until each is ready; SandboxUnavailable if one is not."""
        if self._started:
            return
        self._started = True
        try:
            for server in self._servers:
                server.spawn()
            for server in self._servers:
                server.await_ready()
        except SandboxUnavailable:
            self.close()
            raise
        for server in self._servers:
            self._idle.put(server)
        log.info("sandbox pool of %d servers ready: %s", len(self._servers), self.isolation)
        isolation = self.isolation
        if (
            os.geteuid() == 0
            and isolation is not None
            and not isolation.unprivileged
            and "unprivileged" not in self._disabled
        ):
            log.warning(
                "sandboxed candidates run as root: an unprivileged uid cannot read every "
                "directory on sys.path; install Python where every user can read it"
            )
        for gap in _gaps(isolation):
            log.warning("sandbox isolation is weaker here: %s (see docs/security.md)", gap)

    def close(self) -> None:
        """Stop every server; a call in progress ends at once and raises SandboxUnavailable."""
        self._closed = True
        for server in self._servers:
            if not server.lock.acquire(blocking=False):
                server.kill()  # its caller sees the server die and lets go
                server.lock.acquire()
            try:
                server.stop()
            finally:
                server.lock.release()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def isolation(self) -> Isolation | None:
        """The isolation of the first running server; None before start."""
        return next((s.isolation for s in self._servers if s.isolation is not None), None)

    def server_pids(self) -> list[int]:
        """Process ids of the running servers, for monitoring."""
        return [pid for server in self._servers if (pid := server.pid) is not None]

    def call(
        self,
        source: str,
        entry: str,
        args: Sequence[Sequence[JSONValue]],
        limits: SandboxLimits,
    ) -> SandboxReply:
        """Run ``entry(*a)`` for each ``a`` in ``args`` in one fresh child; blocks the thread."""
        if not self._started or self._closed:
            raise SandboxUnavailable("the sandbox pool is not running")
        request = _encode(
            {
                "source": source,
                "entry": entry,
                "args": [list(a) for a in args],
                "limits": limits.model_dump(),
            }
        )
        server = self._idle.get()
        try:
            with server.lock:
                if self._closed:
                    raise SandboxUnavailable("the sandbox pool was closed")
                server.ensure_running()
                message = server.exchange(request, timeout_s=limits.wall_s + self._reply_grace_s)
                if message is None:
                    server.stop()
                    if self._closed:
                        raise SandboxUnavailable("the sandbox pool was closed during the call")
                    return SandboxReply(
                        values=None,
                        error_kind=SandboxErrorKind.CRASH,
                        error="the sandbox server died or stopped answering; it will be restarted",
                    )
                return _reply(message)
        finally:
            self._idle.put(server)


class _Server:
    """One fork-server process, restarted on demand. Its lock is held by the one caller using it."""

    def __init__(self, index: int, *, disabled: str) -> None:
        self.index = index
        self._disabled = disabled  # comma-separated layer names, passed to the server
        self.lock = threading.Lock()
        self.isolation: Isolation | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._root: str | None = None  # its HOME and the parent of its children's temp dirs

    @property
    def pid(self) -> int | None:
        process = self._process
        return None if process is None or process.poll() is not None else process.pid

    def spawn(self) -> None:
        self._root = tempfile.mkdtemp(prefix=f"codevolve-sandbox-{self.index}-")
        uid = _sandbox_uid(self.index) if os.geteuid() == 0 else -1
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-m", SERVER_MODULE, self._root, str(uid), self._disabled],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env={"PATH": SERVER_SEARCH_PATH, "LANG": "C.UTF-8", "HOME": self._root},
                cwd=self._root,
                start_new_session=True,
                close_fds=True,
                bufsize=0,
            )
        except OSError as exc:
            self.stop()
            raise SandboxUnavailable(f"cannot start a sandbox server: {exc}") from exc

    def await_ready(self) -> None:
        hello = self._receive(time.monotonic() + START_TIMEOUT_S)
        if hello is None or hello.get("ready") is not True:
            self.stop()
            raise SandboxUnavailable("a sandbox server did not start; see the worker's stderr")
        self.isolation = Isolation(**cast(dict[str, bool], hello["isolation"]))

    def ensure_running(self) -> None:
        if self.pid is None:
            log.warning("restarting sandbox server %d", self.index)
            self.stop()
            self.spawn()
            self.await_ready()

    def exchange(self, request: bytes, *, timeout_s: float) -> dict[str, Any] | None:
        """Send a request, await its reply; None if the server died or did not answer in time."""
        process = self._require_process()
        assert process.stdin is not None
        try:
            _write_all(process.stdin.fileno(), request)
        except OSError:  # a broken pipe: the server is gone
            return None
        return self._receive(time.monotonic() + timeout_s)

    def kill(self) -> None:
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def stop(self) -> None:
        """End the server (gracefully when idle) and remove its directory; idempotent."""
        process, self._process = self._process, None
        if process is not None:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.close()  # end of input: an idle server exits
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.stdout.close()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def _receive(self, deadline: float) -> dict[str, Any] | None:
        process = self._require_process()
        assert process.stdout is not None
        fd = process.stdout.fileno()
        header = _read_exactly(fd, HEADER_BYTES, deadline)
        body = None if header is None else _read_exactly(fd, int.from_bytes(header), deadline)
        if body is None:
            self.kill()
            return None
        message: dict[str, Any] = json.loads(body, parse_constant=_reject_constant)
        return message

    def _require_process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise SandboxUnavailable(f"sandbox server {self.index} is not running")
        return self._process


def _gaps(isolation: Isolation | None) -> list[str]:
    """What a candidate can still do with the layers this machine offers."""
    if isolation is None:
        return []
    gaps = []
    if not (isolation.seccomp or isolation.no_network):
        gaps.append("candidates can open sockets (no seccomp filter, no network namespace)")
    if not (isolation.landlock or isolation.unprivileged):
        gaps.append("candidates share the worker's uid and its file access (no Landlock, no root)")
    return gaps


def _sandbox_uid(index: int) -> int:
    pool = os.getpid() % SANDBOX_UIDS_PER_POOL
    return SANDBOX_UID_BASE + SANDBOX_UIDS_PER_POOL * pool + index % SANDBOX_UIDS_PER_POOL


def _encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, ensure_ascii=False, allow_nan=False).encode()
    return len(body).to_bytes(HEADER_BYTES) + body


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, size: int, deadline: float) -> bytes | None:
    """``size`` bytes from ``fd``, or None at its end or at the deadline (monotonic seconds)."""
    chunks: list[bytes] = []
    readable = select.poll()  # not select.select: a busy worker may hold fds above 1024
    readable.register(fd, select.POLLIN)
    while size > 0:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not readable.poll(remaining * 1000):  # milliseconds
            return None
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not plain data")


def _reply(message: dict[str, Any]) -> SandboxReply:
    kind = message["error_kind"]
    values = message["values"]
    return SandboxReply(
        values=None if values is None else tuple(cast(list[JSONValue], values)),
        error_kind=None if kind is None else SandboxErrorKind(kind),
        error=str(message["error"]),
        stdout=str(message["stdout"]),
        stderr=str(message["stderr"]),
        duration_s=float(message["duration_s"]),
    )
