"""A runner: the throw-away process that runs one program for the judge, and nothing else.

The judge (runner_link.py, in the device process) starts a runner ahead of need with a cut-down
environment and one socket. The runner imports torch, prepares its device (a CUDA context
takes seconds) and waits. With ``attach`` it maps the judge's arena, enters its cage and, from
then on, can no longer widen its rights; only then does ``load`` execute the program. The cage:

- its own session and process group (the judge kills the group, and on a root machine every
  process of the runner's uid, at the end);
- an unprivileged uid of its own where the judge runs as root, no new privileges, death with the
  judge;
- Landlock where the kernel has it: everything readable and executable that the uid may read
  but the folders the judge hides (torch.compile's caches: compile_cache.py), nothing writable
  but its scratch folder, its cache folder, ``/dev/null`` and its own GPU's device files;
- the sandbox's seccomp filter: no socket of any kind, no ptrace, no namespaces or mounts, no
  System V IPC (the CPU sandbox's list, evaluator_workers/_confine.py);
- rlimits: processes and threads, open files, file size, no core dumps, CPU time, and on the CPU
  the address space.

What runs the program is its role (runner_role.py): the module the judge names in ``load``,
which then answers the judge's requests about it. The runner names no problem.

Messages both ways are a 4-byte length and UTF-8 JSON (runner_link.py frames the judge's side);
tensors cross as descriptions of shared memory (shared_tensors.py). The runner's replies are
claims of an untrusted process: the judge reads outputs from memory, checks them itself and
keeps its own clock.

Run as ``python -m codevolve.evaluator_workers.gpu.runner SETTINGS_JSON``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import json
import os
import resource
import signal
import socket
import sys
import tempfile
import traceback
from typing import Any

from codevolve.evaluator_workers.gpu.runner_role import Op, ProgramProblem, RoleContext

HEADER_BYTES = 4
MAX_MESSAGE = 64 << 20
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWNET, CLONE_NEWNS = 0x40000000, 0x00020000
MS_REC, MS_PRIVATE = 16384, 1 << 18
MAX_BLOCKED_DEPTH = 16  # root-only folders one inside another on the way to what it needs


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    body = json.dumps(message, allow_nan=False).encode()
    sock.sendall(len(body).to_bytes(HEADER_BYTES, "big") + body)


def _receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """The next message and the file descriptors that came with its first bytes."""
    header, fds, _flags, _addr = socket.recv_fds(sock, HEADER_BYTES, 2)
    if not header:
        return None, fds
    while len(header) < HEADER_BYTES:
        more = sock.recv(HEADER_BYTES - len(header))
        if not more:
            return None, fds
        header += more
    size = int.from_bytes(header, "big")
    if size > MAX_MESSAGE:
        raise ValueError("a message over the size limit")
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None, fds
        chunks.append(chunk)
        left -= len(chunk)
    return json.loads(b"".join(chunks)), fds


class _Runner:
    """The runner's state: its device, its arena, and the role that holds its program."""

    def __init__(self, settings: dict[str, Any]) -> None:
        import torch

        from codevolve.evaluator_workers.gpu import shared_tensors

        self.torch, self.shared = torch, shared_tensors
        self.settings = settings
        self.device = str(settings["device"])
        self.scratch = str(settings["scratch"])
        if self.device == "cuda":
            torch.cuda.init()  # type: ignore[no-untyped-call]
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
        else:
            torch.set_num_threads(int(settings.get("threads", 1)))
        torch.set_grad_enabled(False)
        self.arena: Any = None
        self.cache: str | None = None
        self.visible = ["/"]  # what Landlock lets it read and run: all but the hidden folders
        self.layers: dict[str, bool] = {}
        self.role_ops: dict[str, Op] = {}

    # -- the cage -------------------------------------------------------------------------

    def enter_cage(self) -> None:
        from codevolve.evaluator_workers import _confine

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        parent = os.getppid()
        identity = self.settings.get("uid")
        if os.geteuid() == 0:
            self._namespaces(libc, _confine)
        for hidden in self.settings.get("hidden", []):  # listed before the uid changes
            self.visible = [kept for p in self.visible for kept in _confine.all_but(p, hidden)]
        if isinstance(identity, int) and os.geteuid() == 0:
            os.setgroups([])
            os.setresgid(identity, identity, identity)
            os.setresuid(identity, identity, identity)
        self.layers["own_uid"] = os.geteuid() != 0 and isinstance(identity, int)
        if self.cache and not os.access(self.cache, os.R_OK | os.W_OK | os.X_OK):
            self._drop_cache()
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after setuid, which clears it
        if os.getppid() != parent:
            os._exit(1)
        self._limits()
        wanted = set(self.settings.get("layers", ("landlock", "seccomp")))
        for layer in ("landlock", "seccomp"):
            self.layers[layer] = False
            if layer not in wanted:
                continue
            plan = _confine.Plan(libc, landlock=False, seccomp=layer == "seccomp")
            if layer == "landlock":
                plan.abi = _confine.landlock_abi(libc)
                if not plan.abi:
                    continue
                plan.read_paths, plan.run_files = self.visible, self.visible
                plan.device_files = list(self.settings.get("device_files", []))
                plan.shm_dir = self.cache  # writable too: its compiled kernels (or torch.compile's)
            _confine.confine(self.scratch, plan=plan, libc=libc)  # OSError: never less confined
            self.layers[layer] = True

    def _namespaces(self, libc: Any, confine: Any) -> None:
        """As root: a network namespace of its own (no interface but a down loopback) and a
        mount namespace where the folders its Python needs are reachable by its uid (a tmpfs
        over a root-only folder such as ``/root``, with only those entries bound back)."""
        self.layers["no_network"] = libc.unshare(CLONE_NEWNET) == 0
        mounts = (
            libc.unshare(CLONE_NEWNS) == 0
            and libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) == 0
        )
        needed = [os.path.realpath(sys.executable), *(p for p in sys.path if p), self.scratch]
        if self.cache:
            needed.append(self.cache)
        needed = [p for p in needed if os.path.exists(p)]
        for _depth in range(MAX_BLOCKED_DEPTH):  # a root-only folder inside another one too
            blocked = confine.blocked_directories(needed)
            if not (mounts and blocked and confine.expose(blocked, libc=libc)):
                break

    def _drop_cache(self) -> None:
        """Compile into the scratch folder: the cache folder is out of this uid's reach (a
        root-only folder above it that the mount namespace could not open)."""
        self.cache = None
        os.environ["TRITON_CACHE_DIR"] = os.path.join(self.scratch, "triton")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(self.scratch, "inductor")

    def _limits(self) -> None:
        limits = self.settings["limits"]
        for kind, value in (
            (resource.RLIMIT_NPROC, int(limits["tasks"])),
            (resource.RLIMIT_NOFILE, int(limits["open_files"])),
            (resource.RLIMIT_FSIZE, int(limits["file_bytes"])),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_CPU, int(limits["cpu_s"])),
        ):
            _lower(kind, value)
        if self.device != "cuda":  # a CUDA context reserves far more address space than it uses
            _lower(resource.RLIMIT_AS, int(limits["memory_bytes"]))

    # -- requests ------------------------------------------------------------------------

    def attach(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        handle = self.shared.ArenaHandle(**message["arena"])
        cache = message.get("cache")
        if isinstance(cache, str) and cache:
            self.cache = cache
            if message.get("compiled") is True:  # torch.compile's caches, lent by the judge
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
                os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
            else:  # Triton's compiled kernels of this program's source, kept by the judge for
                os.environ["TRITON_CACHE_DIR"] = cache  # its next judging of that source
        self.arena = self.shared.Arena.attach(handle, fds[0] if fds else None)
        self.enter_cage()
        try:
            self._self_test()
        except Exception as exc:  # noqa: BLE001 - said to the judge, which starts runners with less
            layers = [name for name, held in self.layers.items() if held]
            return {"cage_broke_device": f"{type(exc).__name__}: {exc}"[:500], "layers": layers}
        return {"ok": True, "layers": self.layers}

    def _self_test(self) -> None:
        """What a judging needs of the device still works inside the cage: compute, read the
        arena, and (CUDA) name an output by IPC handle."""
        torch = self.torch
        value = torch.ones(1024, device=self.device).add_(1).sum()
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.shared.export_cuda(torch.ones(1024, device="cuda"))
        self.arena.raw[:16].sum()
        if float(value) != 2048.0:
            raise RuntimeError("the device computed a wrong sum")

    def load(self, message: dict[str, Any]) -> dict[str, Any]:
        """Load the program in the role the judge names (a module: runner_role.py)."""
        role = importlib.import_module(str(message["role"]))
        context = RoleContext(
            arena=self.arena,
            device=self.device,
            scratch=self.scratch,
            rules=bool(self.settings.get("rules", True)),
        )
        loaded = role.load(message, context)
        if isinstance(loaded, str):
            return {"load_error": loaded}
        self.role_ops = loaded.ops()
        return {"ok": True}


def _lower(kind: int, value: int) -> None:
    _soft, hard = resource.getrlimit(kind)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (value, value))


def serve(sock: socket.socket, settings: dict[str, Any]) -> int:
    """A runner's life: prepare the device, say ready, answer requests until the socket closes."""
    try:
        runner = _Runner(settings)
    except BaseException:  # noqa: BLE001 - a runner that cannot start says why, then ends
        _send(sock, {"fault": traceback.format_exc()[-2000:]})
        return 1
    _send(sock, {"ready": True})
    while True:
        message, fds = _receive(sock)
        if message is None:
            return 0
        op = str(message.get("op"))
        try:
            if op == "attach":
                reply = runner.attach(message, fds)
            elif op == "load":
                reply = runner.load(message)
            elif op in runner.role_ops:
                reply = runner.role_ops[op](message)
            else:
                raise ValueError(f"an unknown request {op[:40]!r}")
        except ProgramProblem as exc:
            reply = {"problem": str(exc)}
        except BaseException:  # noqa: BLE001 - the runner's own failure: said, then ended
            _send(sock, {"fault": traceback.format_exc()[-2000:]})
            return 1
        _send(sock, {**reply, "id": message.get("id")})


def zygote(control: socket.socket) -> int:
    """The runners' parent: imports torch and the runner's modules once, then forks a runner
    for each request (its socket comes with the request), so a runner costs a fork, not an
    interpreter start. A request's ``roles`` (runner_role.py) are imported here, once each,
    before the fork. It never touches a device (a CUDA context does not survive a fork: each
    runner makes its own) and never runs a program."""
    import torch  # the import a fork then shares

    from codevolve.evaluator_workers import _confine  # noqa: F401 - imported before any fork
    from codevolve.evaluator_workers.gpu import shared_tensors  # noqa: F401

    torch.zeros(4).add_(1).sum()
    del torch
    imported: set[str] = set()
    _send(control, {"ready": True})
    while True:
        while True:  # reap ended runners
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        message, fds = _receive(control)
        if message is None:
            return 0
        if len(fds) != 1:
            return 1
        settings = dict(message)
        for role in settings.pop("roles", []):
            if role not in imported:
                getattr(importlib.import_module(role), "warm", lambda: None)()
                imported.add(role)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                control.close()
                os.setsid()
                os.environ.update(settings.pop("environment"))
                tempfile.tempdir = None  # the zygote's answer was cached: ask again
                os.chdir(settings["scratch"])
                status = serve(socket.socket(fileno=fds[0]), settings)
            finally:
                os._exit(status)
        os.close(fds[0])
        _send(control, {"pid": pid})


def main(argv: list[str]) -> int:
    settings = json.loads(argv[1])
    sock = socket.socket(fileno=int(settings["socket_fd"]))
    if settings.get("zygote"):
        return zygote(sock)
    return serve(sock, settings)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
