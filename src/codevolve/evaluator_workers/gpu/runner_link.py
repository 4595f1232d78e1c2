"""The judge's side of the boundary: starting, talking to, pausing and ending runners.

A :class:`RunnerPool` keeps runners (runner.py) started ahead of need, so the seconds a fresh
interpreter and a CUDA context take are spent while the previous candidate is judged. Each
runner serves one program and is then ended: its process group is killed, and where the judge
runs as root every process of the runner's own uid too (a grandchild that left the group), and
its scratch folder is removed. Nothing a runner did survives into the next judging.

A runner's replies are size-capped JSON read with a deadline; a runner that breaks the protocol,
dies or overruns is ended and reported as :class:`RunnerGone`. :meth:`Runner.pause` and
:meth:`Runner.resume` stop and continue every process of it (SIGSTOP/SIGCONT; as root every
process of its uid, so a child it forked too): the judge stages inputs for a timed batch and reads
its outputs while the runner is stopped, so no thread of it sees them before the clock starts or
writes them after it stopped.

Imported only in the device process (stdlib, no torch).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import logging
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codevolve.evaluator_workers.errors import WorkerError
from codevolve.evaluator_workers.gpu import compile_cache

log = logging.getLogger(__name__)

RUNNER_MODULE = "codevolve.evaluator_workers.gpu.runner"
HEADER_BYTES = 4
MAX_REPLY = 4 << 20  # bytes of one reply
SEED_MAX_BYTES = 256 << 20  # compiled kernels copied into one runner
START_TIMEOUT_S = 180.0
STOP_WAIT_S = 2.0  # for every thread of a paused runner's processes to be seen stopped
RUNNER_UID_BASE = 230_000  # runners' uids, when the judge runs as root (the CPU sandbox's are
RUNNER_UIDS = 256  # below 65,536)
PASSED_ENV = ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "TRITON_INTERPRET", "TRITON_PTXAS_PATH")
SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"
_uids = itertools.count()


class RunnerGone(WorkerError):
    """A runner that died, overran its deadline or broke the protocol (it has been ended)."""


@dataclass(frozen=True, slots=True)
class RunnerLimits:
    tasks: int = 1024  # processes and threads of the uid (a CUDA runner has dozens of threads)
    open_files: int = 1024
    file_bytes: int = 1 << 30  # compiled kernels in the scratch folder
    cpu_s: int = 3600
    memory_bytes: int = 16 << 30  # address space, on the CPU only


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    device: str  # "cuda" or "cpu"
    limits: RunnerLimits = field(default_factory=RunnerLimits)
    layers: tuple[str, ...] = ("landlock", "seccomp")
    threads: int = 1  # torch's CPU threads in a CPU runner
    rules: bool = True  # the source rules (a filter) before a candidate loads; off in tests only
    cache_root: str = ""  # where compiled kernels are kept per source ("": a folder of the pool)
    # torch.compile's caches, lent to one trusted runner at a time and hidden from every other
    # runner (compile_cache.py; "": none, a trusted runner compiles into its scratch folder)
    compile_cache: str = ""
    roles: tuple[str, ...] = ()  # runner roles' modules the zygote imports ahead (runner_role.py)
    # A runner that compiles kernels and runs none (device "cpu"): no GPU at all (none visible,
    # no device file it may write or ioctl), and Triton compiling for real, not interpreted.
    compile_only: bool = False


class Zygote:
    """The process that forks runners (runner.py's ``zygote``): torch imported once, no
    device touched, no program run. Trusted: it runs only this package's code."""

    def __init__(self, settings: RunnerSettings) -> None:
        self.settings = settings
        self.home = tempfile.mkdtemp(prefix="codevolve-zygote-")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = ours
        self._lock = threading.Lock()
        payload = {"zygote": True, "socket_fd": theirs.fileno()}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", RUNNER_MODULE, json.dumps(payload)],
                env=_environment(self.home, settings),
                cwd=self.home,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            theirs.close()
        self._ready = False
        self._roles: set[str] = set()  # imported by the zygote (or being imported)

    def fork(self, sock: socket.socket, settings: dict[str, Any]) -> int:
        """A new runner serving ``sock`` with ``settings``: its pid. The zygote imports the
        roles of ``settings`` it has not imported yet first, which may take as long as its
        start."""
        with self._lock:
            if not self._ready:
                if self._reply(START_TIMEOUT_S).get("ready") is not True:
                    raise RunnerGone("the runners' zygote did not start")
                self._ready = True
            body = json.dumps(settings).encode()
            try:
                socket.send_fds(
                    self._sock, [len(body).to_bytes(HEADER_BYTES, "big")], [sock.fileno()]
                )
                self._sock.sendall(body)
            except OSError as exc:
                raise RunnerGone(f"the runners' zygote is gone: {exc}") from None
            new_roles = set(settings.get("roles", ())) - self._roles
            self._roles |= new_roles
            pid = self._reply(START_TIMEOUT_S if new_roles else 30.0).get("pid")
        if type(pid) is not int or pid <= 0:
            raise RunnerGone("the runners' zygote did not fork")
        return pid

    def _reply(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        data = b""
        while len(data) < HEADER_BYTES or len(data) < HEADER_BYTES + int.from_bytes(
            data[:HEADER_BYTES], "big"
        ):
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([self._sock], [], [], wait)[0]:
                raise RunnerGone("the runners' zygote did not answer in time")
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                raise RunnerGone(f"the runners' zygote ended (exit code {self.process.poll()})")
            data += chunk
        reply = json.loads(data[HEADER_BYTES:])
        return reply if isinstance(reply, dict) else {}

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        self._sock.close()  # the zygote ends at the end of its socket; its runners with it
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        shutil.rmtree(self.home, ignore_errors=True)


class Runner:
    """One started runner process and its socket."""

    def __init__(self, settings: RunnerSettings, zygote: Zygote) -> None:
        self.settings = settings
        self.scratch = tempfile.mkdtemp(prefix="codevolve-runner-")
        self.uid = _next_uid() if os.geteuid() == 0 else None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = ours
        for folder in ("programs", "triton", "home"):
            os.makedirs(os.path.join(self.scratch, folder), exist_ok=True)
        if self.uid is not None:
            for folder, _dirs, _files in os.walk(self.scratch):
                os.chown(folder, self.uid, self.uid)
        payload = {
            "device": settings.device,
            "scratch": self.scratch,
            "uid": self.uid,
            "layers": list(settings.layers),
            "limits": vars_of(settings.limits),
            "threads": settings.threads,
            "rules": settings.rules,
            "device_files": (
                gpu_device_files()
                if settings.device == "cuda" and not settings.compile_only
                else []
            ),
            "environment": _scratch_environment(self.scratch),
            "roles": list(settings.roles),
            "hidden": [os.path.realpath(settings.compile_cache)] if settings.compile_cache else [],
        }
        self._pid = 0
        self._lease: compile_cache.Lease | None = None
        self._ended = False
        try:
            self._pid = zygote.fork(theirs, payload)
        except RunnerGone:
            ours.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        finally:
            theirs.close()
        self.ready_reply: dict[str, Any] | None = None
        self._sent = 0  # requests sent: each reply names the one it answers
        self._stopped: set[int] = set()  # the processes pause() stopped, resume() continues

    @property
    def pid(self) -> int:
        return self._pid

    def kernel_cache(self, source: str) -> str:
        """A folder for Triton's compiled kernels of ``source``, kept across judgings: only a
        runner given this very source may write it (Landlock), so what a program leaves there
        serves that program alone. Owned by this runner's uid for now."""
        digest = hashlib.sha256(source.encode()).hexdigest()[:32]
        folder = os.path.join(self.settings.cache_root or tempfile.gettempdir(), digest)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if self.uid is not None:
            for path, _dirs, files in os.walk(folder):
                os.chown(path, self.uid, self.uid)
                for name in files:
                    os.chown(os.path.join(path, name), self.uid, self.uid, follow_symlinks=False)
        return folder

    def compile_cache(self) -> str | None:
        """The pool's torch.compile cache folder, lent to this runner until it ends (only a
        trusted runner may be given it: compile_cache.py); None where the pool has none, or
        another runner holds it too long."""
        if not self.settings.compile_cache or self._ended:
            return None
        if self._lease is None:
            self._lease = compile_cache.lend(self.settings.compile_cache, self.uid)
        return None if self._lease is None else self._lease.folder

    def seed_kernels(self, folder: str) -> None:
        """Copy the compiled kernels in ``folder`` (a compile runner's per-source cache, which
        that runner could write) into this runner's own Triton cache, before it attaches: the
        regular files only, each opened below its folder without following a link (os.fwalk),
        never a link, a device or anything else a candidate could have left there to make the
        judge read what it should not; at most :data:`SEED_MAX_BYTES` in all."""
        target = os.path.join(self.scratch, "triton")
        budget = SEED_MAX_BYTES
        for path, _dirs, files, dir_fd in os.fwalk(folder, follow_symlinks=False):
            for name in files:
                if ".tmp" in name:  # a file Triton was still writing
                    continue
                relative = os.path.relpath(os.path.join(path, name), folder)
                size = _copy_regular(name, dir_fd, os.path.join(target, relative), budget)
                if size is not None:
                    budget -= size
        if self.uid is not None:
            for path, _dirs, files in os.walk(target):
                os.chown(path, self.uid, self.uid)
                for name in files:
                    os.chown(os.path.join(path, name), self.uid, self.uid, follow_symlinks=False)

    def alive(self) -> bool:
        """Running (or stopped), not ended: a zombie waiting for the zygote counts as ended."""
        if self._ended:
            return False
        try:
            with open(f"/proc/{self._pid}/stat") as stat:
                return not stat.read().rsplit(") ", 1)[1].startswith(("Z", "X"))
        except (OSError, IndexError):
            return False

    def await_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        reply = self.receive(timeout_s)
        if not reply.get("ready"):
            raise RunnerGone(f"a runner did not start: {str(reply)[-1500:]}")
        self.ready_reply = reply

    def request(
        self, message: dict[str, Any], *, timeout_s: float, fds: Sequence[int] = ()
    ) -> dict[str, Any]:
        self.send(message, fds=fds)
        return self.receive(timeout_s)

    def send(self, message: dict[str, Any], *, fds: Sequence[int] = ()) -> None:
        self._sent += 1
        body = json.dumps({**message, "id": self._sent}, allow_nan=False).encode()
        data = len(body).to_bytes(HEADER_BYTES, "big") + body
        try:
            if fds:
                socket.send_fds(self._sock, [data[:HEADER_BYTES]], list(fds))
                data = data[HEADER_BYTES:]
            self._sock.sendall(data)
        except OSError as exc:
            self.end()
            raise RunnerGone(f"the runner's socket closed: {exc}") from None

    def receive(self, timeout_s: float) -> dict[str, Any]:
        """The runner's next reply: JSON of at most MAX_REPLY bytes within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        header = self._read(HEADER_BYTES, deadline)
        size = int.from_bytes(header, "big")
        if size > MAX_REPLY:
            self.end()
            raise RunnerGone(f"a runner's reply of {size} bytes is over the limit")
        try:
            reply = json.loads(self._read(size, deadline))
        except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
            self.end()
            raise RunnerGone("a runner's reply is not JSON") from None
        if not isinstance(reply, dict):
            self.end()
            raise RunnerGone("a runner's reply is not an object")
        if "fault" in reply:
            self.end()
            raise RunnerGone(f"the runner failed: {str(reply['fault'])[-1500:]}")
        starting = self._sent == 0 and self.ready_reply is None  # only a new runner says ready
        if reply.get("id") != self._sent and not (starting and reply.get("ready")):
            self.end()
            raise RunnerGone("a runner's reply does not answer the judge's last request")
        if select.select([self._sock], [], [], 0)[0] and self.alive():
            self.end()
            raise RunnerGone("a runner sent more than one reply")
        return reply

    def _read(self, size: int, deadline: float) -> bytes:
        chunks, left = [], size
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([self._sock], [], [], wait)[0]:
                self.end()
                raise RunnerGone("the runner did not answer in time")
            chunk = self._sock.recv(min(left, 1 << 20))
            if not chunk:
                self.end()
                raise RunnerGone("the runner ended")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def pause(self) -> None:
        """Stop every process of the runner (SIGSTOP) and wait until every thread of each is
        seen stopped: a child it forked maps the arena too. As root that is every process of
        its uid; otherwise its process group (a child in a session of its own escapes)."""
        deadline = time.monotonic() + STOP_WAIT_S
        while True:
            new = [pid for pid in self._members() if pid not in self._stopped]
            for pid in new:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
            self._stopped.update(new)
            if (not new and all(_all_stopped(pid) for pid in self._stopped)) or (
                time.monotonic() > deadline
            ):
                return
            time.sleep(0.0002)

    def resume(self) -> None:
        """Continue the processes :meth:`pause` stopped (none of them could fork meanwhile)."""
        stopped, self._stopped = self._stopped or {self.pid}, set()
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)

    def _members(self) -> set[int]:
        """The runner and its processes: as root every process of its uid, else its group."""
        members = {self.pid}
        for name in _listdir("/proc"):
            if name.isdigit() and _belongs(int(name), self.uid, self.pid):
                members.add(int(name))
        return members

    def end(self) -> None:
        """Kill the runner's group and, as root, every process of its uid; reap; clean up."""
        if self._ended:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        self._ended = True
        if self.uid is not None:
            _kill_uid(self.uid)
        self._sock.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self._lease is not None:  # no process of the runner is left to touch it
            self._lease.give_back()
            self._lease = None


class RunnerPool:
    """Runners started ahead of need, one device's worth (thread-safe)."""

    def __init__(self, settings: RunnerSettings, *, warm: int = 2) -> None:
        self._own_cache = not settings.cache_root
        if self._own_cache:
            root = tempfile.mkdtemp(prefix="codevolve-kernels-")
            os.chmod(root, 0o711)  # runners may enter their own source's folder, not list others
            settings = dataclasses.replace(settings, cache_root=root)
        self.settings = settings
        self._warm = warm
        self._lock = threading.Lock()
        self._starting: list[tuple[Runner, threading.Thread]] = []
        self._zygote: Zygote | None = None

    def preload(self, role: str) -> None:
        """Have the zygote import ``role`` (a runner role's module) before the runners it forks
        from now on, so that loading a program in that role costs no import. A runner started
        before imports it when it loads."""
        with self._lock:
            if role not in self.settings.roles:
                roles = (*self.settings.roles, role)
                self.settings = dataclasses.replace(self.settings, roles=roles)

    def drop_layer(self, held: list[str], why: str) -> bool:
        """Runners from now on go without the first of the cage's optional layers that held in
        a runner whose device then broke (Landlock, then seccomp); False when none is left."""
        for layer in ("landlock", "seccomp"):
            if layer in held and layer in self.settings.layers:
                log.warning(
                    "runners go without %s from now on: the device broke in it (%s)", layer, why
                )
                with self._lock:
                    layers = tuple(name for name in self.settings.layers if name != layer)
                    self.settings = dataclasses.replace(self.settings, layers=layers)
                    starting, self._starting = self._starting, []
                for runner, thread in starting:
                    thread.join(timeout=START_TIMEOUT_S)
                    runner.end()
                return True
        return False

    def _fork(self) -> Runner:
        if self._zygote is None or not self._zygote.alive:
            if self._zygote is not None:
                self._zygote.close()
            self._zygote = Zygote(self.settings)
        return Runner(self.settings, self._zygote)

    def take(self) -> Runner:
        """A started runner, ready for ``attach``; another one is started behind it."""
        with self._lock:
            while len(self._starting) < self._warm + 1:
                self._starting.append(self._start())
            runner, thread = self._starting.pop(0)
        thread.join()
        if runner.ready_reply is None:
            runner.end()
            with self._lock:
                runner = self._fork()
            runner.await_ready()
        return runner

    def _start(self) -> tuple[Runner, threading.Thread]:
        runner = self._fork()

        def wait() -> None:
            try:
                runner.await_ready()
            except RunnerGone as exc:
                log.warning("a runner failed to start: %s", exc)

        thread = threading.Thread(target=wait, name="runner-start", daemon=True)
        thread.start()
        return runner, thread

    def close(self) -> None:
        with self._lock:
            starting, self._starting = self._starting, []
        for runner, thread in starting:
            thread.join(timeout=START_TIMEOUT_S)
            runner.end()
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        if self._own_cache:
            shutil.rmtree(self.settings.cache_root, ignore_errors=True)


def _uses_gpu(settings: RunnerSettings) -> bool:
    return settings.device == "cuda" and not settings.compile_only


def vars_of(limits: RunnerLimits) -> dict[str, int]:
    return {name: getattr(limits, name) for name in RunnerLimits.__dataclass_fields__}


def _next_uid() -> int:
    return RUNNER_UID_BASE + RUNNER_UIDS * (os.getpid() % 4096) + next(_uids) % RUNNER_UIDS


def _copy_regular(name: str, dir_fd: int, destination: str, budget: int) -> int | None:
    """Copy ``name`` of the folder ``dir_fd`` to ``destination`` if it is a regular file with
    one link and at most ``budget`` bytes (opened without following a link): its size, or None
    where it was not copied."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as held:
        info = os.fstat(held.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > budget:
            return None
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        with open(destination, "wb") as out:
            shutil.copyfileobj(held, out)
    return int(info.st_size)


def _scratch_environment(scratch: str) -> dict[str, str]:
    """What a runner's environment says of its own scratch folder."""
    return {
        "HOME": os.path.join(scratch, "home"),
        "TMPDIR": scratch,
        "TRITON_CACHE_DIR": os.path.join(scratch, "triton"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "inductor"),
    }


def _environment(scratch: str, settings: RunnerSettings) -> dict[str, str]:
    """The runner's whole environment: no variable of the worker's but a few CUDA/Triton ones.
    On the CPU, Triton's interpreter (the only way its kernels run there), but for a compile
    runner, which sees no GPU and compiles for the judge's."""
    package_root = str(Path(__file__).resolve().parents[3])  # the folder holding codevolve/
    env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    env.update(
        _scratch_environment(scratch),
        PATH=SEARCH_PATH,
        LANG="C.UTF-8",
        PYTHONPATH=package_root,
        PYTHONDONTWRITEBYTECODE="1",
    )
    if settings.compile_only:
        env.pop("TRITON_INTERPRET", None)
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif settings.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    return env


def _belongs(pid: int, uid: int | None, group: int) -> bool:
    """Whether process ``pid`` runs as ``uid`` (where the runner has one) or, without one, is
    in process group ``group``."""
    try:
        if uid is None:
            with open(f"/proc/{pid}/stat") as stat:
                return int(stat.read().rsplit(") ", 1)[1].split()[2]) == group
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("Uid:"):
                    return int(line.split()[1]) == uid
    except (OSError, ValueError, IndexError):
        pass
    return False


def _all_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (or it has ended)."""
    folder = f"/proc/{pid}/task"
    for task in _listdir(folder):
        try:
            with open(os.path.join(folder, task, "stat")) as stat:
                if stat.read().rsplit(") ", 1)[1][:1] not in "tTZX":
                    return False
        except (OSError, IndexError):
            continue
    return True


def _kill_uid(uid: int) -> None:
    """Kill every process of ``uid``: ``kill -KILL -1`` run as that uid reaches no other."""
    kill = shutil.which("kill", path=SEARCH_PATH)
    if kill is None:
        log.warning("no kill command to sweep the processes of uid %d", uid)
        return
    try:
        subprocess.run(
            [kill, "-KILL", "--", "-1"],
            user=uid, group=uid, extra_groups=[], env={}, timeout=30, check=False,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("could not sweep the processes of uid %d: %s", uid, exc)


def gpu_device_files() -> list[str]:
    """The device files a runner may open for its GPU: the control and memory ones, and the
    GPU's own (``/dev/nvidiaN`` with N its minor number) when it can be told from the
    visible device's UUID; every ``/dev/nvidiaN`` otherwise."""
    common = [f"/dev/{name}" for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")]
    gpus = sorted(
        f"/dev/{name}"
        for name in _listdir("/dev")
        if name.startswith("nvidia") and name[6:].isdigit()
    )
    minor = _visible_minor()
    own = [f"/dev/nvidia{minor}"] if minor is not None else gpus
    return [path for path in common + own if os.path.exists(path)]


def _visible_minor() -> int | None:
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(0).uuid)
    except Exception:  # noqa: BLE001 - no UUID to match: every GPU's file is allowed
        return None
    root = "/proc/driver/nvidia/gpus"
    for bus in _listdir(root):
        try:
            with open(os.path.join(root, bus, "information")) as info:
                text = info.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if uuid.lower() in fields.get("GPU UUID", "").lower():
            minor = fields.get("Device Minor", "").strip()
            return int(minor) if minor.isdigit() else None
    return None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
