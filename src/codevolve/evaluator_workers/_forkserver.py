"""The sandbox fork server: runs untrusted candidate code, each call in a fresh forked child.

:class:`codevolve.evaluator_workers.sandbox.SandboxPool` starts it as
``python -I -m codevolve.evaluator_workers._forkserver ROOT UID [DISABLED]`` (DISABLED: a
comma-separated list of isolation layers not to set up, for tests of the fallbacks) with a scrubbed
environment, in a session of its own. It imports only the standard library (and :mod:`._cage` and
:mod:`._confine`, the child's side), so a fork costs little and a child holds nothing of the
worker: no settings, connections or secrets.

Protocol on stdin/stdout: a 4-byte big-endian length, then that many bytes of UTF-8 JSON. The server
first sends ``{"ready": true, "isolation": {...}}``, then answers each request
``{source, entry, args, limits}`` with ``{values, error_kind, error, stdout, stderr, duration_s}``.
End of input ends the server.

The child of the next call is forked ahead, while the server waits, and enters its cage (see
:mod:`._cage`). A call hands it the request and watches it until its result is complete, it exits
or the wall limit passes; after the reply the server kills what is left of the child's process group
and removes its directory (and, where Landlock or seccomp are missing, what the child could leave
elsewhere: see :mod:`._leftovers`). The server moves itself into an empty network namespace and
an IPC namespace of its own where it may, and becomes the subreaper of its children's orphans, so
that descendants which left the child's group are killed after each call too. As root it also
mounts a small tmpfs of its own on ``/dev/shm`` (in a mount namespace of its own), where children
may create the POSIX semaphores ``multiprocessing`` needs; it is emptied after each call.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import math
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from typing import Any, NoReturn

from codevolve.evaluator_workers import _cage, _confine, _leftovers
from codevolve.evaluator_workers._cage import HEADER_BYTES, frame, receive, write_all

# Stdlib modules candidates commonly import; imported once here so a child does not pay for them.
# Never add a module that starts threads at import: the children are forked.
PRELOADED = ("collections", "dataclasses", "functools", "itertools", "math", "typing")
MAX_RESULT_BYTES = 32 << 20  # bytes of JSON one child may send back
MEMORY_RSS_SHARE = 0.8  # killed at this share of the memory limit: counted as out of memory
POLL_S = 0.01  # seconds; child-exit polling, only where pidfd_open is missing
SWEEP_ROUNDS = 8  # rounds of killing orphaned descendants after a call
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 16384, 1 << 18
MS_NOEXEC = 8
PR_SET_CHILD_SUBREAPER = 36
SHM_DIR = "/dev/shm"  # where glibc creates POSIX semaphores and shared memory (sem_open, shm_open)
# The private /dev/shm: room for semaphores and modest shared arrays, not for a RAM disk.
SHM_OPTIONS = b"mode=1777,size=64m,nr_inodes=4096"
CHILD_KINDS = frozenset({"exception", "invalid_output", "load_error", "memory"})
LAYERS = frozenset(
    {
        "unprivileged",
        "no_network",
        "private_ipc",
        "private_shm",
        "subreaper",
        "landlock",
        "seccomp",
    }
)


def main(argv: list[str]) -> int:
    root, uid = argv[1], int(argv[2])
    wanted = LAYERS - frozenset(argv[3].split(",") if len(argv) > 3 else ())
    # The protocol moves off fds 0 and 1 so that nothing printed by accident can corrupt it.
    request_fd, reply_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    for name in PRELOADED:
        importlib.import_module(name)
    libc = ctypes.CDLL(None, use_errno=True)
    gc.freeze()  # the collector of a child then skips, so never copies, what the server holds
    os.chmod(root, 0o711)  # children may enter their own dirs in it, not list them
    # As root, a mount namespace of the server's own (its mounts private: nothing mounted in it
    # shows outside) for a private /dev/shm and for exposing a Python under a private home.
    mounts = (
        os.geteuid() == 0
        and not wanted.isdisjoint({"unprivileged", "private_shm"})
        and libc.unshare(CLONE_NEWNS) == 0
        and libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) == 0
    )
    identity = (
        _sandbox_identity(uid, root=root, mounts=mounts, libc=libc)
        if "unprivileged" in wanted
        else None
    )
    isolation = {
        "unprivileged": identity is not None,
        "no_network": "no_network" in wanted and libc.unshare(CLONE_NEWNET) == 0,
        "private_ipc": "private_ipc" in wanted and libc.unshare(CLONE_NEWIPC) == 0,
        "private_shm": "private_shm" in wanted and mounts and _private_shm(libc),
        "subreaper": "subreaper" in wanted and libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0,
    }
    shm_dir = SHM_DIR if isolation["private_shm"] else None
    plan = _confine.prepare(libc, wanted=wanted, call_dir=root, shm_dir=shm_dir)
    isolation.update(plan.layers)
    private_ipc = isolation["private_ipc"]
    write_all(reply_fd, frame({"ready": True, "isolation": isolation}))

    def fork_call() -> _Call:
        return _Call(root=root, identity=identity, plan=plan, private_ipc=private_ipc, libc=libc)

    call = fork_call()
    try:
        while (request := receive(request_fd)) is not None:
            try:
                write_all(reply_fd, frame(call.run(request)))
            finally:
                _kill_group(call.pid)
            # The next child is forked before this one is reaped and its files removed, so that
            # waiting for a dying process delays no caller.
            spare = fork_call()
            call.clean_up(keep=spare.pid)
            call = spare
    except BrokenPipeError:  # the pool went away mid-call
        pass
    finally:
        call.clean_up()
        shutil.rmtree(root, ignore_errors=True)  # also when the pool died without stopping us
    return 0


def _sandbox_identity(
    uid: int, *, root: str, mounts: bool, libc: ctypes.CDLL
) -> tuple[int, int] | None:
    """The (uid, gid) children run as: ``uid`` where it can import all that the server can.

    A Python installed under a private home (say /root/.pyenv) is out of an unprivileged uid's
    reach; then the server, in its mount namespace (``mounts``), covers each blocking directory
    with an empty tmpfs and binds back only the paths it needs: those on ``sys.path`` and the
    interpreter's, which children may run again. Where that fails, children keep the server's
    uid (None).
    """
    if uid < 0 or os.geteuid() != 0:
        return None
    directories = [path for path in sys.path if os.path.isdir(path)]
    interpreter = os.path.dirname(os.path.realpath(sys.executable))
    if _can_use_as(uid, directories=directories, root=root):
        if mounts:  # only a subprocess needs the interpreter: exposing it is best effort
            _confine.expose(_confine.blocked_directories([interpreter]), libc=libc)
        return uid, uid
    exposed = mounts and _confine.expose(
        _confine.blocked_directories([*directories, interpreter, root]), libc=libc
    )
    return (uid, uid) if exposed and _can_use_as(uid, directories=directories, root=root) else None


def _private_shm(libc: ctypes.CDLL) -> bool:
    """Mount an empty, small tmpfs of the server's own on /dev/shm (no exec, no devices, no
    set-uid), where children may create POSIX semaphores; it is emptied after each call. Call
    in the server's own mount namespace only."""
    if not os.path.isdir(SHM_DIR):
        return False
    flags = ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC)
    return bool(libc.mount(b"tmpfs", SHM_DIR.encode(), b"tmpfs", flags, SHM_OPTIONS) == 0)


def _can_use_as(uid: int, *, directories: list[str], root: str) -> bool:
    """Probed in a child, as ``uid``: can it list ``directories`` and enter ``root``?"""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for directory in directories:
                os.listdir(directory)
            os.chdir(root)
            status = 0
        finally:
            os._exit(status)
    return os.waitpid(pid, 0)[1] == 0


class _Call:
    """One forked child waiting for its request, and what is its: directory, files, pipes."""

    def __init__(
        self,
        *,
        root: str,
        identity: tuple[int, int] | None,
        plan: _confine.Plan,
        private_ipc: bool,
        libc: ctypes.CDLL,
    ) -> None:
        self.dir = tempfile.mkdtemp(prefix="call-", dir=root)
        # Without Landlock an unprivileged uid can still write world-writable directories; what
        # it leaves there is removed after the call, so no state reaches the next one.
        self.leftovers_of = identity[0] if identity is not None and not plan.abi else None
        self.libc = libc
        # Without seccomp a child can create System V IPC objects; in a private namespace all
        # of them are its, and they are removed after the call.
        self.clear_ipc = private_ipc and plan.seccomp is None
        # The private /dev/shm holds only what this server's children made: emptied whole.
        self.clear_shm = plan.shm_dir
        if identity is not None:
            os.chown(self.dir, *identity)
        # Output files are unnamed and held open here, so a candidate cannot swap them for a link.
        self.stdout, self.stderr = _unnamed_file(root), _unnamed_file(root)
        request_read, self.request_fd = os.pipe()
        self.result_fd, result_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            fds = (request_read, result_write, self.stdout, self.stderr)
            _cage.enter_and_run(self.dir, fds=fds, identity=identity, plan=plan, libc=libc)
        os.close(request_read)
        os.close(result_write)
        self.reaped = False
        self.cleaned = False

    def run(self, request: bytes) -> dict[str, Any]:
        """Hand the request to the child; watch it until it answers, exits or runs out of time."""
        parsed = json.loads(request)
        limits: dict[str, Any] = parsed["limits"]
        started = time.monotonic()
        with contextlib.suppress(BrokenPipeError):  # the child died: watching it tells how
            write_all(self.request_fd, len(request).to_bytes(HEADER_BYTES, "big") + request)
        watched = _watch(self.pid, self.result_fd, deadline=started + float(limits["wall_s"]))
        duration_s = time.monotonic() - started
        if not watched.complete:
            self._reap(watched)
        reply = _classify(watched, limits=limits, arity=len(parsed["args"]))
        cap = int(limits["output_bytes"])
        reply["stdout"] = _read_output(self.stdout, cap)
        reply["stderr"] = _read_output(self.stderr, cap)
        reply["duration_s"] = duration_s
        return reply

    def clean_up(self, *, keep: int | None = None) -> None:
        """Kill and reap the child and its descendants, but the server's child ``keep``; remove
        its files. Idempotent."""
        if self.cleaned:
            return
        self.cleaned = True
        if not self.reaped:
            self._reap(_Watched())
        for fd in (self.request_fd, self.result_fd, self.stdout, self.stderr):
            os.close(fd)
        _sweep_orphans(keep=keep)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.leftovers_of is not None:
            _leftovers.remove_files_of(self.leftovers_of)
        if self.clear_ipc:
            _leftovers.remove_ipc_objects(self.libc)
        if self.clear_shm is not None:
            _leftovers.empty(self.clear_shm)

    def _reap(self, watched: _Watched) -> None:
        _kill_group(self.pid)  # before it is reaped, so that its group id cannot be reused
        _, watched.status, usage = os.wait4(self.pid, 0)
        self.reaped = True
        watched.cpu_s = usage.ru_utime + usage.ru_stime
        watched.max_rss = usage.ru_maxrss * 1024


def _unnamed_file(directory: str) -> int:
    fd, path = tempfile.mkstemp(dir=directory)
    os.unlink(path)
    return fd


class _Watched:
    """What the server saw of one child."""

    def __init__(self) -> None:
        self.result = bytearray()  # the framed message, as far as it came
        self.complete = False  # the whole framed message came
        self.exited = False
        self.status = 0  # as from waitpid
        self.cpu_s = 0.0  # seconds of CPU, user + system
        self.max_rss = 0  # bytes
        self.timed_out = False
        self.too_large = False


def _watch(pid: int, read_fd: int, *, deadline: float) -> _Watched:
    """Collect the child's framed result until it is complete, the child exits or time is up."""
    watched = _Watched()
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    reading = True
    try:
        while not (watched.complete or watched.too_large):
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                watched.exited = True
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                watched.timed_out = True
                break
            fds = [fd for fd in (pidfd, read_fd if reading else None) if fd is not None]
            wait_s = remaining if pidfd is not None else min(remaining, POLL_S)
            if read_fd in select.select(fds, [], [], wait_s)[0]:
                reading = _read_some(read_fd, watched)
    finally:
        if pidfd is not None:
            os.close(pidfd)
    if watched.exited:
        os.set_blocking(read_fd, False)  # a grandchild may hold the write end open
        while not (watched.complete or watched.too_large) and _read_some(read_fd, watched):
            pass
    return watched


def _read_some(fd: int, watched: _Watched) -> bool:
    """Read what the pipe holds; False at its end or when nothing more is there."""
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return False
    watched.result += chunk
    if len(watched.result) >= HEADER_BYTES:
        size = int.from_bytes(watched.result[:HEADER_BYTES], "big")
        watched.too_large = size > MAX_RESULT_BYTES
        watched.complete = len(watched.result) >= HEADER_BYTES + size
    return bool(chunk)


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):  # os.kill: the child may not have called setsid() yet
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


def _sweep_orphans(*, keep: int | None) -> None:
    """Kill and reap descendants that left the child's group; as subreaper they are ours now."""
    me = os.getpid()
    for _ in range(SWEEP_ROUNDS):
        try:
            with open(f"/proc/{me}/task/{me}/children") as listing:
                orphans = [int(pid) for pid in listing.read().split() if int(pid) != keep]
        except OSError:  # no such file without CONFIG_PROC_CHILDREN: reap what has exited
            orphans = []
            while (exited := _exited_child()) is not None and exited != keep:
                os.waitpid(exited, 0)
        for pid in orphans:
            _kill_group(pid)
            os.waitpid(pid, 0)
        if not orphans:
            return


def _exited_child() -> int | None:
    try:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    return None if info is None else info.si_pid


def _classify(watched: _Watched, *, limits: dict[str, Any], arity: int) -> dict[str, Any]:
    if watched.timed_out:
        return _failure("timeout", f"wall-clock limit of {limits['wall_s']} s exceeded")
    if watched.too_large:
        return _failure("invalid_output", f"result larger than {MAX_RESULT_BYTES} bytes")
    if os.WIFSIGNALED(watched.status):
        number = os.WTERMSIG(watched.status)
        cpu_limit = math.ceil(float(limits["cpu_s"]))
        if number == signal.SIGXCPU or (number == signal.SIGKILL and watched.cpu_s >= cpu_limit):
            return _failure("timeout", f"CPU limit of {cpu_limit} s exceeded")
        if watched.max_rss >= MEMORY_RSS_SHARE * int(limits["memory_mb"]) * (1 << 20):
            return _failure("memory", f"killed by {_signal_name(number)} at the memory limit")
        return _failure("crash", f"killed by {_signal_name(number)}")
    if not watched.complete:
        code = os.WEXITSTATUS(watched.status)
        return _failure("crash", f"exited with status {code} without a result")
    size = int.from_bytes(watched.result[:HEADER_BYTES], "big")
    return _parse_result(bytes(watched.result[HEADER_BYTES : HEADER_BYTES + size]), arity=arity)


def _parse_result(data: bytes, *, arity: int) -> dict[str, Any]:
    """The child ran untrusted code: its message is checked as strictly as any foreign input."""
    try:
        message = json.loads(data.decode(), parse_constant=_reject_constant)
        if not isinstance(message, dict):
            raise ValueError("not an object")
        if "values" in message:
            values = message["values"]
            if not isinstance(values, list) or len(values) != arity:
                raise ValueError("values do not match the arguments")
            json.dumps(values, ensure_ascii=False).encode()  # lone surrogates raise here
            return {"values": values, "error_kind": None, "error": ""}
        kind, error = message.get("error_kind"), message.get("error")
        if kind not in CHILD_KINDS or not isinstance(error, str):
            raise ValueError("unknown error kind")
        return _failure(kind, error)
    except (ValueError, RecursionError) as exc:
        return _failure("invalid_output", f"malformed result: {exc}")


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not plain data")


def _failure(kind: str, error: str) -> dict[str, Any]:
    return {"values": None, "error_kind": kind, "error": error}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _read_output(fd: int, cap: int) -> str:
    data = os.pread(fd, cap, 0)
    text = data.decode(errors="replace")
    return text + f"\n[output truncated at {cap} bytes]" if len(data) >= cap else text


if __name__ == "__main__":
    sys.exit(main(sys.argv))
