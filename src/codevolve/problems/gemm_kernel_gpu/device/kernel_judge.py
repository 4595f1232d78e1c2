"""The trusted judge of gemm-kernel-gpu candidates: is ``matmul(x, w, y, workspace, num_sms)``
right on every checked shape, and how fast is it against cuBLAS?

The judge never runs the candidate. It runs in the device process and holds what a candidate
would want to forge: the inputs (drawn from a secret salted seed), the reference products, the
comparison and the clock. The candidate's module runs in a runner (runner.py, kernel_role.py), a
throw-away caged process started ahead of need by the device's
:class:`~codevolve.evaluator_workers.gpu.runner_link.RunnerPool` (the one KernelBench judging
uses) and ended after this judging. Its buffers are the judge's: they live in the judge's arena,
and the runner is stopped whenever the judge writes or reads them.

:class:`Judging` checks every shape of ``check_shapes`` and then of ``shapes`` on three
distributions (kernel_bench.py); the first wrong shape ends the judging. It then times every
shape of ``shapes`` in timed batches (kernel_timing.py) and ends the candidate's runner; cuBLAS's
times through the same path, in a runner of its own, come from kernel_references.py (timed then,
or kept from an earlier judging on this device). :func:`measure` is one judging from start to
end; the device's pipeline (kernel_pipeline.py) runs the same steps for many candidates, their
kernels compiled ahead (kernel_compile.py).

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import importlib.metadata
import os
import random
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from codevolve.core.measurement import quantile
from codevolve.evaluator_workers.gpu.cuda_device import device_info
from codevolve.evaluator_workers.gpu.remote import (
    REQUEST_TIMEOUT_S,
    CandidateProblem,
    LoadFailed,
    Remote,
    start_remote,
)
from codevolve.evaluator_workers.gpu.runner_link import RunnerPool
from codevolve.evaluator_workers.gpu.shared_tensors import Arena
from codevolve.evaluator_workers.gpu.source_loader import dunder_problem
from codevolve.problems.gemm_kernel_gpu.device.kernel_bench import (
    DISTRIBUTIONS,
    CheckedCall,
    InputSet,
    Workspace,
    poison,
    set_bytes,
    workspace_bytes,
    workspace_elements,
)
from codevolve.problems.gemm_kernel_gpu.device.kernel_loader import ENTRY_POINT
from codevolve.problems.gemm_kernel_gpu.device.kernel_references import References
from codevolve.problems.gemm_kernel_gpu.device.kernel_role import ROLE
from codevolve.problems.gemm_kernel_gpu.device.kernel_timing import (
    Plan,
    ask_stopped,
    stop,
    time_shape,
)
from codevolve.problems.gemm_tiling.gpu_timing import Shape, Timing, timing_dict

CPU_SMS = 4  # what a launcher is told on the CPU, where only tests run candidates
WARMUP_BATCHES = 2
NOT_TIMED = "not timed: an earlier shape failed"


@dataclass(frozen=True, slots=True)
class MeasureSettings:
    """One ``kernel.measure`` (validated by kernel_jobs.py)."""

    shapes: tuple[Shape, ...]
    check_shapes: tuple[Shape, ...] = ()
    seed: int = 0
    samples: int = 10  # timed batches per shape
    warmup: int = WARMUP_BATCHES
    time: bool = True


@dataclass(slots=True)
class _Timed:
    """One shape's timing as far as it got."""

    plan: Plan
    graph: bool = False
    why: str = ""
    candidate: list[float] = field(default_factory=list)  # ms per call, per batch
    cublas: list[float] = field(default_factory=list)
    failure: Timing | None = None


def measure(
    source: str,
    settings: MeasureSettings,
    *,
    device: str,
    runners: RunnerPool,
    references: References | None = None,
) -> dict[str, Any]:
    """Judge ``source`` on ``device`` ("cuda" or "cpu"); plain data (kernel_jobs.py's format).
    cuBLAS's times come from ``references`` (kept per shape a while), else are timed for this
    judging alone."""
    if references is None:
        references = References(device, runners, num_sms=num_sms_of(device), max_age_s=0.0)
    judging = Judging(source, settings, runners=runners, references=references)
    reply = judging.run()
    started = time.perf_counter()
    cublas = references.times(judging.wanted())
    reply["seconds"]["reference"] = time.perf_counter() - started
    return judging.finish(reply, cublas)


def num_sms_of(device: str) -> int:
    """What a launcher is told as ``num_sms``: the GPU's SM count (:data:`CPU_SMS` on the CPU)."""
    if device == "cuda":
        return int(torch.cuda.get_device_properties(0).multi_processor_count)
    return CPU_SMS


def new_reply(device: str) -> dict[str, Any]:
    """A ``kernel.measure`` reply before anything was judged (kernel_jobs.py's format)."""
    return {
        "device": {**device_info(device), "triton": triton_version()},
        "load_error": "",
        "problems": [],
        "timings": [],
        "compiled_ahead": 0,  # kernels the runner started with (compiled in the compile lane)
        "compiled_late": 0,  # kernels the runner compiled itself (none where the lane did all)
        "isolation": {},
        "seconds": {"start": 0.0, "check": 0.0, "time": 0.0, "reference": 0.0},
    }


def triton_version() -> str | None:
    """Triton's version here (None without Triton): part of what a stored timing was taken
    under (docs/launch-store.md)."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


def _lap(reply: dict[str, Any], name: str, started: float) -> float:
    seconds = reply["seconds"]
    seconds[name] = time.perf_counter() - started - sum(seconds.values())
    return float(seconds[name])


class Judging:
    """One candidate's judging: its arena and its runner; cuBLAS's times come after it
    (:meth:`wanted`, :meth:`finish`), from a runner of their own."""

    def __init__(
        self,
        source: str,
        settings: MeasureSettings,
        *,
        runners: RunnerPool,
        references: References,
        compiled: str | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        """``compiled``: a folder of this source's kernels compiled ahead (kernel_compile.py),
        copied into the runner's own cache; ``timeout_s``: what one request to the runner may
        take (less where nothing is left to compile)."""
        self.source = source
        self.settings = settings
        self.device = references.device
        self.runners = runners
        self.compiled = compiled
        self.timeout_s = timeout_s
        self.rng = random.Random(f"{settings.seed}-{secrets.randbits(62)}")  # secret inputs
        self.num_sms = references.num_sms
        self.plans = {
            shape: references.plan(
                shape, samples=settings.samples, warmup=settings.warmup, timed=settings.time
            )
            for shape in settings.shapes
        }
        self.rows: dict[Shape, _Timed] = {}
        self.arena: Arena | None = None
        self.remote: Remote | None = None
        self.layers: dict[str, bool] = {}
        self.ahead = 0  # compiled kernels the runner started with

    def run(self) -> dict[str, Any]:
        """Load, check and time the candidate; its runner ended. The reply's timings are filled
        in by :meth:`finish`."""
        settings = self.settings
        reply = new_reply(self.device)
        refused = dunder_problem(self.source) if self.runners.settings.rules else ""
        if refused:
            reply["load_error"] = refused
            return reply
        started = time.perf_counter()
        try:
            self.start()
            reply["isolation"] = self.layers
            reply["compiled_ahead"] = self.ahead = self._cubins()
            _lap(reply, "start", started)
            self.check(reply["problems"])
            reply["load_s"] = time.perf_counter() - started  # start, load, compile, check
            _lap(reply, "check", started)
            if settings.time and not (reply["problems"] and reply["problems"][-1]):
                self.time_candidate(reply)
        except LoadFailed as exc:
            reply["load_error"] = str(exc)
        except CandidateProblem as exc:  # before the first call: attaching, loading
            reply["load_error"] = str(exc)
        finally:
            self.close()
        return reply

    def start(self) -> None:
        checked = (*self.settings.check_shapes, *self.settings.shapes)
        needed = max(
            [set_bytes(s) + workspace_bytes(s, self.device) for s in checked]
            + [
                p.batch * set_bytes(s) + workspace_bytes(s, self.device)
                for s, p in self.plans.items()
            ]
        )
        self.arena = Arena.create(needed, self.device)
        self.remote = start_remote(
            self.runners,
            self.arena,
            self.source,
            trusted=False,
            role=ROLE,
            who=ENTRY_POINT,
            compiled=self.compiled,
            timeout_s=self.timeout_s,
        )
        self.layers = self.remote.layers
        stop(self.remote)

    def check(self, problems: list[str]) -> None:
        """A problem per checked shape ("" if right), up to the first wrong one."""
        for shape in (*self.settings.check_shapes, *self.settings.shapes):
            problem = self._check_shape(shape)
            problems.append(problem)
            if problem:
                return

    def _check_shape(self, shape: Shape) -> str:
        assert self.arena is not None and self.remote is not None
        self.arena.reset()
        inputs = InputSet.place(self.arena, shape)
        workspace = Workspace.place(self.arena, workspace_elements(shape[0], shape[1], self.device))
        message = {
            "op": "kernel.go",
            "rounds": [inputs.specs],
            "workspace": workspace.spec,
            "num_sms": self.num_sms,
        }
        for distribution in DISTRIBUTIONS:
            call = CheckedCall(inputs, distribution, self.rng.getrandbits(62))
            poison(inputs.guarded_y)
            poison(workspace.guarded)
            if self.device == "cuda":
                torch.cuda.synchronize()
            try:
                ask_stopped(self.remote, message)
            except CandidateProblem as exc:
                return f"{distribution}: {exc}"
            wrong = call.problem(workspace)
            if wrong:
                return f"{distribution}: {wrong}"
        return ""

    def time_candidate(self, reply: dict[str, Any]) -> None:
        """Every shape timed, the candidate's batches, up to the first that fails; its runner
        ended after."""
        assert self.remote is not None and self.arena is not None
        started = time.perf_counter()
        self.rows = {shape: _Timed(plan) for shape, plan in self.plans.items()}
        for shape, row in self.rows.items():
            try:
                times, batch = time_shape(
                    self.remote, self.arena, shape, row.plan,
                    salt=self.rng.getrandbits(62), num_sms=self.num_sms, check=True,
                )  # fmt: skip
            except CandidateProblem as exc:
                status = "incorrect" if str(exc).startswith("timed batch") else "error"
                row.failure = Timing(status=status, detail=str(exc)[:2000])
                break
            row.graph, row.why, row.candidate = batch.graph, batch.why, times
        reply["seconds"]["time"] = time.perf_counter() - started
        reply["compiled_late"] = self._cubins() - self.ahead
        self.remote.close()
        self.remote = None

    def _cubins(self) -> int:
        """Compiled kernels in the runner's Triton cache, counted by the judge (the runner is
        stopped or not started): those it started with, then those it compiled itself."""
        if self.remote is None:
            return 0
        folder = os.path.join(self.remote.runner.scratch, "triton")
        return sum(name.endswith(".cubin") for _, _, files in os.walk(folder) for name in files)

    def wanted(self) -> list[tuple[Shape, Plan]]:
        """The (shape, plan) pairs whose cuBLAS time :meth:`finish` needs."""
        return [(shape, row.plan) for shape, row in self.rows.items() if row.candidate]

    def finish(
        self, reply: dict[str, Any], cublas: Mapping[tuple[Shape, Plan], list[float]]
    ) -> dict[str, Any]:
        """The reply with every shape's timing row, cuBLAS's times from ``cublas``."""
        if self.rows:
            for shape, row in self.rows.items():
                row.cublas = list(cublas.get((shape, row.plan), ())) if row.candidate else []
            reply["timings"] = [_row(row) for row in self.rows.values()]
        return reply

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
            self.remote = None
        if self.arena is not None:
            self.arena.close()
            self.arena = None


def _row(row: _Timed) -> dict[str, Any]:
    """A shape's Timing as a dict, with the batch size and whether a CUDA graph ran it."""
    if row.failure is not None:
        timing = row.failure
    elif not row.candidate:
        timing = Timing(status="skipped", detail=NOT_TIMED)
    else:
        ours = [1e3 * t for t in row.candidate]  # microseconds per call
        theirs = [1e3 * t for t in row.cublas]
        timing = Timing(
            status="ok",
            t_us=quantile(ours, 0.5),
            p20_us=quantile(ours, 0.2),
            p80_us=quantile(ours, 0.8),
            cublas_us=quantile(theirs, 0.5),
            samples=len(ours),
        )
    extra = {"batch": row.plan.batch, "graph": row.graph, "eager_why": row.why}
    return {**timing_dict(timing), **extra}
