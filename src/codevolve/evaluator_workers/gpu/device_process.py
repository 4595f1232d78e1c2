"""A device held by a worker: trusted jobs run in a child process pinned to one GPU.

The child is started with the ``spawn`` method, so it shares no CUDA state with the worker, and
with ``CUDA_VISIBLE_DEVICES`` set to its GPU before torch is imported, so it sees only that one
device (as device 0). It lives across evaluations: Triton's compiled kernels and the measurement
cache stay warm. When a job raises or the child dies or hangs, the reply is a fault, the child is
killed and the next job starts a fresh one: a CUDA error is sticky for its context, so the process
that saw it must not serve another program.

The child serves a table of jobs, ``{name: "package.module:function"}``: the problems' device
jobs (their plug-ins declare them; the composition root passes them in) and the generic ones
(:data:`GENERIC_JOBS`). A job's module is imported on the job's first call, in the child only, so
a device process never imports what its jobs do not need (Triton, for a KernelBench judge).
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import threading
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from types import ModuleType
from typing import Any

from codevolve.core.device import GPU, DeviceReply
from codevolve.core.problem import JSONValue

log = logging.getLogger(__name__)

# Jobs every device process serves: the device it holds, described.
GENERIC_JOBS = {"info": "codevolve.evaluator_workers.gpu.cuda_device:info_job"}
START_TIMEOUT_S = 120.0  # seconds: importing torch and creating a CUDA context
MAX_ERROR_CHARS = 2000
STOP_GRACE_S = 10.0  # seconds a child gets to exit on its own before it is killed


class DeviceProcess:
    """A :class:`~codevolve.core.device.Device` backed by one child process (thread-safe)."""

    def __init__(
        self,
        gpu: str | None = "0",
        *,
        index: int = 0,
        jobs: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``gpu``: the GPU's id as CUDA_VISIBLE_DEVICES names it (None: leave it unset, for
        fakes); ``index``: the number recorded with each evaluation; ``jobs``: the jobs it
        serves besides the generic ones, ``{name: "package.module:function"}``; ``env``: more
        variables for the child (``TRITON_INTERPRET=1`` for a device process on the CPU)."""
        self._gpu = gpu
        self._index = index
        self._jobs = {**GENERIC_JOBS, **(jobs or {})}
        self._env = dict(env or {})
        self._lock = threading.Lock()
        self._process: Any = None
        self._conn: Connection | None = None
        self._starts = 0  # children started so far

    @property
    def index(self) -> int:
        return self._index

    @property
    def capability(self) -> str:
        return GPU

    @property
    def restarts(self) -> int:
        """Children started after the first: each recycled one after a fault or a hang."""
        return max(0, self._starts - 1)

    @property
    def pid(self) -> int | None:
        return None if self._process is None else int(self._process.pid)

    def run(self, job: str, payload: JSONValue, *, timeout_s: float) -> DeviceReply:
        with self._lock:
            if self._process is None:
                self._start()
            assert self._conn is not None
            try:
                self._conn.send((job, payload))
                if not self._conn.poll(timeout_s):
                    self._stop(graceful=False)  # it hangs: no grace
                    message = f"device job {job} timed out after {timeout_s:g} s"
                    return DeviceReply(error=message, fault=True)
                kind, value = self._conn.recv()
            except (EOFError, OSError, BrokenPipeError) as exc:
                code = self._process.exitcode if self._process is not None else None
                self._stop()
                return DeviceReply(
                    error=f"device process died during {job} (exit code {code}): {exc!r}",
                    fault=True,
                )
            if kind == "ok":
                return DeviceReply(value=value)
            if kind == "error":
                return DeviceReply(error=str(value))
            self._stop()  # a fault: recycle the process
            return DeviceReply(error=str(value), fault=True)

    def close(self) -> None:
        with self._lock:
            self._stop()

    def __enter__(self) -> DeviceProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        env = {**self._env, "CODEVOLVE_DEVICE_INDEX": str(self._index)}
        if self._gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = self._gpu
        process = context.Process(
            # Not a daemon: the device process starts its own compile workers. close() ends it.
            target=_serve,
            args=(child, self._jobs, env),
            name=f"device-{self._index}",
            daemon=False,
        )
        process.start()
        child.close()
        self._starts += 1
        self._process, self._conn = process, parent

    def _stop(self, *, graceful: bool = True) -> None:
        """End the child: closing the pipe lets it shut its helpers down and exit (or it has
        exited itself after a fault); one that does not within the grace period is killed."""
        if self._conn is not None:
            self._conn.close()
        if self._process is not None:
            self._process.join(timeout=STOP_GRACE_S if graceful else 0)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(timeout=10)
        self._process, self._conn = None, None


class JobTable:
    """The child's jobs: each module imported on its first job, and what it declares.

    A job module signals an expected failure by raising its ``JobError`` (the reply is an error,
    the process lives on); anything else is a fault. Its ``shutdown()``, if it has one, runs
    before the process ends (it stops helper processes), modules in the order they were loaded.
    """

    def __init__(self, targets: Mapping[str, str]) -> None:
        self._targets = dict(targets)
        self._modules: dict[str, ModuleType] = {}  # loaded so far, in order

    def __contains__(self, job: object) -> bool:
        return job in self._targets

    def function(self, job: str) -> Callable[[Any], Any]:
        module_name, _, function = self._targets[job].partition(":")
        module = self._modules.get(module_name)
        if module is None:
            module = self._modules[module_name] = importlib.import_module(module_name)
        found: Callable[[Any], Any] = getattr(module, function)
        return found

    def expected(self, job: str, exc: BaseException) -> bool:
        module = self._modules.get(self._targets[job].partition(":")[0])
        job_error = getattr(module, "JobError", None)
        return isinstance(job_error, type) and isinstance(exc, job_error)

    def shutdown(self) -> None:
        for module in self._modules.values():
            getattr(module, "shutdown", lambda: None)()


def _serve(conn: Connection, jobs: Mapping[str, str], env: dict[str, str]) -> None:
    """The child: pin, then answer jobs until the pipe closes or a job faults (JobTable)."""
    os.environ.update(env)  # before a job module imports torch: the child sees one GPU
    table = JobTable(jobs)
    while True:
        try:
            job, payload = conn.recv()
        except EOFError:
            table.shutdown()
            return
        if job not in table:
            conn.send(("error", f"unknown device job {job!r}"))
            continue
        try:
            conn.send(("ok", table.function(job)(payload)))
        except BaseException as exc:  # noqa: BLE001 - the device boundary: report, then die
            text = "".join(traceback.format_exception_only(exc)).strip()[:MAX_ERROR_CHARS]
            if table.expected(job, exc):
                conn.send(("error", text))
                continue
            conn.send(("fault", text))
            conn.close()
            try:
                table.shutdown()  # the compile workers hold no CUDA state of ours: they end cleanly
            finally:
                os._exit(3)
