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

Several jobs may be in flight at once (one per worker loop that shares the device): each runs in
a thread of the child. A job holds the device (:func:`device_lane`) for its whole run, so two
jobs never time on it together, and its timeout counts from when it got the device, as when
the worker sent one job at a time; unless its module names it in ``CONCURRENT_JOBS``: such a job
(a pipeline that compiles on the host's cores while the device times other programs) takes the
lane itself for what needs it, and is called as ``function(payload, alive)``; ``alive()`` tells
the worker the job is still moving (it restarts the job's deadline), so that a job queued behind
others is not taken for a hang.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import multiprocessing
import os
import threading
import time
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
QUEUED_ALIVE_S = 1.0  # a job waiting for the device says it is alive this often

_LANE = threading.Lock()


def device_lane() -> threading.Lock:
    """The device of this process: held by every job for its run, and by a concurrent job
    (``CONCURRENT_JOBS``) for the part of its work that uses the device."""
    return _LANE


class _Waiter:
    """One job in flight: its reply when it comes, and its deadline."""

    def __init__(self, job: str, timeout_s: float, generation: int) -> None:
        self.job = job
        self.timeout_s = timeout_s
        self.generation = generation
        self.deadline = time.monotonic() + timeout_s
        self.reply: DeviceReply | None = None
        self._done = threading.Event()

    def alive(self) -> None:
        self.deadline = time.monotonic() + self.timeout_s

    def settle(self, reply: DeviceReply) -> None:
        if self.reply is None:
            self.reply = reply
        self._done.set()

    def wait(self) -> bool:
        """Wait for the reply until the deadline: True when it came."""
        while not self._done.is_set():
            left = self.deadline - time.monotonic()
            if left <= 0:
                return False
            self._done.wait(min(left, 1.0))
        return True


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
        self._lock = threading.Lock()  # the child, its pipes and the jobs waiting on it
        self._process: Any = None
        self._requests: Connection | None = None
        self._waiting: dict[int, _Waiter] = {}
        self._numbers = itertools.count(1)
        self._generation = 0  # bumped whenever a child is given up
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
        process = self._process
        return None if process is None else int(process.pid)

    def run(self, job: str, payload: JSONValue, *, timeout_s: float) -> DeviceReply:
        with self._lock:
            if self._process is None:
                self._start()
            assert self._requests is not None
            number = next(self._numbers)
            waiter = self._waiting[number] = _Waiter(job, timeout_s, self._generation)
            try:
                self._requests.send((number, job, payload))
            except (OSError, ValueError) as exc:
                code = self._process.exitcode
                self._waiting.pop(number, None)
                self._give_up_locked(f"device process died before {job} (exit code {code})")
                return DeviceReply(error=f"device process died during {job}: {exc!r}", fault=True)
        if not waiter.wait():
            message = f"device job {job} timed out after {timeout_s:g} s"
            waiter.settle(DeviceReply(error=message, fault=True))
            self._recycle(waiter.generation, message, graceful=False)  # it hangs: no grace
        assert waiter.reply is not None
        return waiter.reply

    def close(self) -> None:
        self._recycle(None, "the device process was closed", graceful=True)

    def __enter__(self) -> DeviceProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        requests_out, requests_in = context.Pipe(duplex=False)  # (reader, writer)
        replies_out, replies_in = context.Pipe(duplex=False)
        env = {**self._env, "CODEVOLVE_DEVICE_INDEX": str(self._index)}
        if self._gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = self._gpu
        process = context.Process(
            # Not a daemon: the device process starts its own runners. close() ends it.
            target=_serve,
            args=(requests_out, replies_in, self._jobs, env),
            name=f"device-{self._index}",
            daemon=False,
        )
        process.start()
        requests_out.close()
        replies_in.close()
        self._starts += 1
        self._generation += 1
        self._process, self._requests = process, requests_in
        reader = threading.Thread(
            target=self._read,
            args=(replies_out, process, self._generation),
            name=f"device-{self._index}-replies",
            daemon=True,
        )
        reader.start()

    def _read(self, replies: Connection, process: Any, generation: int) -> None:
        """Hand each reply of the child of ``generation`` to the job waiting for it."""
        try:
            while True:
                try:
                    kind, number, value = replies.recv()
                except (EOFError, OSError):
                    break
                with self._lock:
                    waiter = self._waiting.get(number)
                    if kind != "alive":
                        self._waiting.pop(number, None)
                if waiter is None:
                    continue
                if kind == "alive":
                    waiter.alive()
                elif kind == "ok":
                    waiter.settle(DeviceReply(value=value))
                elif kind == "error":
                    waiter.settle(DeviceReply(error=str(value)))
                else:  # a fault: the child ends itself; the jobs still in it fail with it
                    waiter.settle(DeviceReply(error=str(value), fault=True))
                    self._recycle(generation, f"the device faulted in {waiter.job}")
                    break
        finally:
            replies.close()
        process.join(timeout=1.0)  # gone or going: its exit code, where it has one
        self._recycle(generation, f"device process died (exit code {process.exitcode})")

    def _recycle(self, generation: int | None, why: str, *, graceful: bool = True) -> None:
        """Give up the child of ``generation`` (None: whichever runs), failing every job still
        waiting on it with ``why``; a later job starts a fresh one."""
        with self._lock:
            if self._process is None or generation not in (None, self._generation):
                return
            process, requests = self._give_up_locked(why)
        _stop(process, requests, graceful=graceful)

    def _give_up_locked(self, why: str) -> tuple[Any, Connection | None]:
        process, requests = self._process, self._requests
        waiting, self._waiting = self._waiting, {}
        self._process, self._requests = None, None
        self._generation += 1
        for waiter in waiting.values():
            waiter.settle(DeviceReply(error=f"{why}; {waiter.job} did not finish", fault=True))
        return process, requests


def _stop(process: Any, requests: Connection | None, *, graceful: bool) -> None:
    """End a child: closing its request pipe lets it shut its helpers down and exit (or it has
    exited itself after a fault); one that does not within the grace period is killed."""
    if requests is not None:
        requests.close()
    if process is not None:
        process.join(timeout=STOP_GRACE_S if graceful else 0)
        if process.is_alive():
            process.kill()
            process.join(timeout=10)


class JobTable:
    """The child's jobs: each module imported on its first job, and what it declares.

    A job module signals an expected failure by raising its ``JobError`` (the reply is an error,
    the process lives on); anything else is a fault. Its ``CONCURRENT_JOBS`` names the functions
    that take the device lane themselves (the module docstring). Its ``shutdown()``, if it has
    one, runs before the process ends (it stops helper processes), modules in the order they
    were loaded.
    """

    def __init__(self, targets: Mapping[str, str]) -> None:
        self._targets = dict(targets)
        self._modules: dict[str, ModuleType] = {}  # loaded so far, in order
        self._lock = threading.Lock()

    def __contains__(self, job: object) -> bool:
        return job in self._targets

    def _module(self, job: str) -> ModuleType:
        name = self._targets[job].partition(":")[0]
        with self._lock:
            module = self._modules.get(name)
            if module is None:
                module = self._modules[name] = importlib.import_module(name)
        return module

    def function(self, job: str) -> Callable[..., Any]:
        found: Callable[..., Any] = getattr(self._module(job), self._targets[job].partition(":")[2])
        return found

    def concurrent(self, job: str) -> bool:
        names = getattr(self._module(job), "CONCURRENT_JOBS", ())
        return self._targets[job].partition(":")[2] in names

    def expected(self, job: str, exc: BaseException) -> bool:
        module = self._modules.get(self._targets[job].partition(":")[0])
        job_error = getattr(module, "JobError", None)
        return isinstance(job_error, type) and isinstance(exc, job_error)

    def shutdown(self) -> None:
        with self._lock:
            modules = list(self._modules.values())
        for module in modules:
            getattr(module, "shutdown", lambda: None)()


class _Replies:
    """The child's end of the reply pipe, shared by its jobs' threads."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, kind: str, number: int, value: Any) -> None:
        # OSError, ValueError: the worker gave this child up, and nobody listens
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._conn.send((kind, number, value))


def _serve(
    requests: Connection, replies: Connection, jobs: Mapping[str, str], env: dict[str, str]
) -> None:
    """The child: pin, then start each job in a thread of its own until the request pipe
    closes or a job faults (JobTable)."""
    os.environ.update(env)  # before a job module imports torch: the child sees one GPU
    table = JobTable(jobs)
    out = _Replies(replies)
    while True:
        try:
            number, job, payload = requests.recv()
        except EOFError:
            table.shutdown()
            return
        if job not in table:
            out.send("error", number, f"unknown device job {job!r}")
            continue
        threading.Thread(
            target=_run_job, args=(table, out, number, job, payload), name=job, daemon=True
        ).start()


def _run_job(table: JobTable, out: _Replies, number: int, job: str, payload: Any) -> None:
    try:
        function = table.function(job)
        if table.concurrent(job):
            value = function(payload, lambda: out.send("alive", number, None))
        else:
            lane = device_lane()
            while not lane.acquire(timeout=QUEUED_ALIVE_S):
                out.send("alive", number, None)  # queued behind another job, not hung
            try:
                out.send("alive", number, None)  # its deadline counts from its start
                value = function(payload)
            finally:
                lane.release()
        out.send("ok", number, value)
    except BaseException as exc:  # noqa: BLE001 - the device boundary: report, then die
        text = "".join(traceback.format_exception_only(exc)).strip()[:MAX_ERROR_CHARS]
        if table.expected(job, exc):
            out.send("error", number, text)
            return
        out.send("fault", number, text)
        try:
            table.shutdown()  # its runners hold no CUDA state of ours: they end cleanly
        finally:
            os._exit(3)
