"""A runner: the throw-away process that runs one program for the judge, and nothing else.

The judge (runner_link.py, in the device process) starts a runner ahead of need with a cut-down
environment and one socket. The runner imports torch, prepares its device (a CUDA context
takes seconds) and waits. With ``attach`` it maps the judge's arena, enters its cage and, from
then on, can no longer widen its rights; only then does ``load`` execute the program. The cage:

- its own session and process group (the judge kills the group, and on a root machine every
  process of the runner's uid, at the end);
- an unprivileged uid of its own where the judge runs as root, no new privileges, death with the
  judge;
- Landlock where the kernel has it: everything readable and executable that the uid may read,
  nothing writable but its scratch folder, ``/dev/null`` and its own GPU's device files;
- the sandbox's seccomp filter: no socket of any kind, no ptrace, no namespaces or mounts, no
  System V IPC (the CPU sandbox's list, evaluator_workers/_confine.py);
- rlimits: processes and threads, open files, file size, no core dumps, CPU time, and on the CPU
  the address space.

Messages both ways are a 4-byte length and UTF-8 JSON (runner_link.py frames the judge's side);
tensors cross as descriptions of shared memory (shared_tensors.py). The runner's replies are
claims of an untrusted process: the judge reads outputs from memory, checks them itself and
keeps its own clock.

Run as ``python -m codevolve.evaluator_workers.gpu.runner SETTINGS_JSON``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import resource
import signal
import socket
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HEADER_BYTES = 4
MAX_MESSAGE = 64 << 20
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWNET, CLONE_NEWNS = 0x40000000, 0x00020000
MS_REC, MS_PRIVATE = 16384, 1 << 18
MESSAGE_CHARS = 300  # of a program's exception message


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
    """The runner's state: its device, its arena, its program and model."""

    def __init__(self, settings: dict[str, Any]) -> None:
        import torch

        from codevolve.evaluator_workers.gpu import shared_tensors
        from codevolve.evaluator_workers.gpu.kb_loader import KbLoader
        from codevolve.evaluator_workers.gpu.kb_watch import OpRecorder

        self.torch, self.shared, self.recorder_class = torch, shared_tensors, OpRecorder
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
        self.loader = KbLoader(Path(self.scratch) / "programs")
        if not settings.get("rules", True):  # tests: what the judge catches behind the rules
            from codevolve.evaluator_workers.gpu import kb_loader

            kb_loader.check_model_new = lambda source: ""  # type: ignore[attr-defined]
        self.arena: Any = None
        self.program: Callable[..., Any] | None = None
        self.model: Any = None
        self.kept: list[Any] = []  # outputs the judge has yet to copy (CUDA)
        self.staged: list[tuple[list[Any], list[dict[str, Any]]]] = []
        self.trusted = False
        self.cache: str | None = None
        self.layers: dict[str, bool] = {}
        self.role_ops: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}

    # -- the cage -------------------------------------------------------------------------

    def enter_cage(self) -> None:
        from codevolve.evaluator_workers import _confine

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        parent = os.getppid()
        identity = self.settings.get("uid")
        if os.geteuid() == 0:
            self._namespaces(libc, _confine)
        if isinstance(identity, int) and os.geteuid() == 0:
            os.setgroups([])
            os.setresgid(identity, identity, identity)
            os.setresuid(identity, identity, identity)
        self.layers["own_uid"] = os.geteuid() != 0 and isinstance(identity, int)
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
                plan.read_paths, plan.run_files = ["/"], ["/"]
                plan.device_files = list(self.settings.get("device_files", []))
                plan.shm_dir = self.cache  # writable too: the compiled kernels of this source
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
        blocked = confine.blocked_directories([p for p in needed if os.path.exists(p)])
        if mounts and blocked:
            confine.expose(blocked, libc=libc)

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
            self.cache = cache  # Triton's compiled kernels of this program's source, kept by the
            os.environ["TRITON_CACHE_DIR"] = cache  # judge for its next judging of that source
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
        self.trusted = bool(message.get("trusted"))
        if message.get("role") == "kernel":  # gemm-kernel-gpu: a launch function on the judge's
            return self._load_kernel(message)  # buffers (kernel_role.py)
        source = str(message["source"])
        loaded: Any = (
            self.loader.reference(source) if self.trusted else self.loader.candidate(source)
        )
        program = getattr(loaded, "model" if self.trusted else "model_new", None)
        if program is None:
            return {"load_error": str(getattr(loaded, "message", "the program did not load"))}
        self.program = program
        return {"ok": True}

    def _load_kernel(self, message: dict[str, Any]) -> dict[str, Any]:
        from codevolve.evaluator_workers.gpu import kernel_role

        rules = bool(self.settings.get("rules", True))
        role = kernel_role.KernelRole.load(
            message, arena=self.arena, device=self.device, scratch=self.scratch, rules=rules
        )
        if isinstance(role, str):
            return {"load_error": role}
        role.problem = _Problem  # the candidate's errors, answered as ``problem``
        self.role_ops = role.ops()
        return {"ok": True}

    def construct(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.program is not None
        init = [self.shared.decode(v, self.arena.tensor) for v in message["init"]]
        init = [v.clone() if isinstance(v, self.torch.Tensor) else v for v in init]
        self.torch.manual_seed(int(message["seed"]))
        model = self._call("constructing", self.program, init)
        if not isinstance(model, self.torch.nn.Module):
            raise _Problem(f"{self._name()}(...) is not a torch.nn.Module")
        self.model = model.to(self.device)
        return {"ok": True}

    def compile(self, message: dict[str, Any]) -> dict[str, Any]:
        """The model replaced by ``torch.compile`` of it (a reference's baseline)."""
        del message
        self.model = self.torch.compile(self.model)
        return {"ok": True}

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        """A checked call: run the model on each round's inputs with the aten operators it
        runs recorded, and deliver the outputs."""
        self.stage(message)
        recorder = self.recorder_class()
        reply = self.go({}, recorder=recorder)
        reply["ops"] = sorted(recorder.ops | recorder.overloads)
        return reply

    def stage(self, message: dict[str, Any]) -> dict[str, Any]:
        """Resolve the rounds' input descriptions now, so that a timed batch spends nothing on
        them."""
        self.staged = [
            ([self.shared.decode(v, self.arena.tensor) for v in r["inputs"]], r.get("slots", []))
            for r in message["rounds"]
        ]
        return {"ok": True}

    def go(self, message: dict[str, Any], *, recorder: Any = None) -> dict[str, Any]:
        """Run the staged rounds, wait for the device, deliver: on the CPU each output copied
        into its slots, on CUDA kept and named by IPC handle."""
        del message
        self.kept = []
        if recorder is None:
            outputs = [self._call("", self.model, args) for args, _ in self.staged]
        else:
            with recorder:
                outputs = [self._call("", self.model, args) for args, _ in self.staged]
        if self.device == "cuda":
            self.torch.cuda.synchronize()
            if recorder is None:
                alike = self._alike(outputs)
                if alike is not None:
                    return {"alike": alike}
        results = [
            self._deliver(output, slots)
            for output, (_args, slots) in zip(outputs, self.staged, strict=True)
        ]
        reply: dict[str, Any] = {"outputs": results}
        if recorder is not None:
            reply["aliases"] = [
                self._alias(o, args) for o, (args, _) in zip(outputs, self.staged, strict=True)
            ]
        return reply

    def _alike(self, outputs: list[Any]) -> dict[str, Any] | None:
        """A timed batch's outputs in one short description when they are plain CUDA tensors of
        one shape, dtype and layout (the usual case): their facts once, then per output only
        which allocation holds it and where. Kept until the next batch. None otherwise."""
        torch = self.torch
        if not outputs:
            return None
        first: Any = outputs[0]
        if type(first) is not torch.Tensor or first.device.type != "cuda":
            return None
        key = (first.dtype, first.shape, first.stride(), first.layout)
        if any(
            type(o) is not torch.Tensor
            or o.device.type != "cuda"
            or (o.dtype, o.shape, o.stride(), o.layout) != key
            for o in outputs
        ):
            return None
        if first.layout != torch.strided:
            return None
        self.kept = outputs
        handles: dict[str, int] = {}
        places = []
        for output in outputs:
            handle, offset = self.shared.locate_cuda(output)
            places.append([handles.setdefault(handle, len(handles)), offset])
        facts = {**self.shared.spec_of(first), "device": "cuda", "type": "Tensor"}
        return {"facts": facts, "handles": list(handles), "places": places}

    def _alias(self, output: Any, args: list[Any]) -> int:
        """The index of an input whose memory an output shares (-1: none)."""
        outs = {t.untyped_storage().data_ptr() for t in self.shared.tensors_in(output)}
        for index, arg in enumerate(args):
            if isinstance(arg, self.torch.Tensor) and arg.untyped_storage().data_ptr() in outs:
                return index
        return -1

    def _deliver(self, output: Any, slots: list[dict[str, Any]]) -> Any:
        count = iter(range(1 << 30))

        def place(tensor: Any) -> dict[str, Any]:
            index = next(count)
            facts = {
                **self.shared.spec_of(tensor),
                "device": tensor.device.type,
                "layout": str(tensor.layout),
                "type": type(tensor).__name__,
            }
            if tensor.device.type != self.device or tensor.layout != self.torch.strided:
                return {**facts, "slot": -1}
            if self.device == "cuda":
                self.kept.append(tensor)
                return {**facts, **self.shared.export_cuda(tensor)}
            if index >= len(slots):
                return {**facts, "slot": -1}
            slot = self.arena.tensor(slots[index])
            if slot.shape != tensor.shape or slot.dtype != tensor.dtype:
                return {**facts, "slot": -1}
            slot.copy_(tensor)
            return {**facts, "slot": index}

        try:
            return self.shared.encode(output, place)
        except self.shared.SharingError as exc:
            raise _Problem(f"{self._name()} returned {exc}") from None

    def _name(self) -> str:
        return "Model" if self.trusted else "ModelNew"

    def _call(self, what: str, function: Callable[..., Any], args: Any) -> Any:
        try:
            return function(*args)
        except Exception as exc:  # noqa: BLE001 - the program's error is its result
            lines = str(exc).strip().splitlines() or [""]
            label = f"{what} {self._name()}" if what else self._name()
            text = f"{label} raised {type(exc).__name__}: {lines[0][:MESSAGE_CHARS]}"
            raise _Problem(text) from None


class _Problem(Exception):
    """What the program did wrong, sent to the judge as ``problem``."""


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
    by_message: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "load": runner.load,
        "construct": runner.construct,
        "call": runner.call,
        "stage": runner.stage,
        "go": runner.go,
        "compile": runner.compile,
    }
    while True:
        message, fds = _receive(sock)
        if message is None:
            return 0
        op = str(message.get("op"))
        try:
            if op == "attach":
                reply = runner.attach(message, fds)
            elif op in by_message:
                reply = by_message[op](message)
            elif op in runner.role_ops:
                reply = runner.role_ops[op](message)
            else:
                raise ValueError(f"an unknown request {op[:40]!r}")
        except _Problem as exc:
            reply = {"problem": str(exc)}
        except BaseException:  # noqa: BLE001 - the runner's own failure: said, then ended
            _send(sock, {"fault": traceback.format_exc()[-2000:]})
            return 1
        _send(sock, {**reply, "id": message.get("id")})


def zygote(control: socket.socket) -> int:
    """The runners' parent: imports torch and the runner's modules once, then forks a runner
    for each request (its socket comes with the request), so a runner costs a fork, not an
    interpreter start. It never touches a device (a CUDA context does not survive a fork: each
    runner makes its own) and never runs a program."""
    import torch  # the import a fork then shares

    from codevolve.evaluator_workers import _confine  # noqa: F401 - imported before any fork
    from codevolve.evaluator_workers.gpu import kb_loader, kb_watch, kernel_role, shared_tensors  # noqa: F401

    with kb_watch.OpRecorder():  # its first use imports torch's dispatch machinery: seconds
        torch.zeros(4).add_(1).sum()
    del torch
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
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                control.close()
                os.setsid()
                settings = dict(message)
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
