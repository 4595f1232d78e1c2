"""The trusted judge of gemm-kernel-gpu candidates: is ``matmul(x, w, y, workspace, num_sms)``
right on every checked shape, and how fast is it against cuBLAS?

The judge never runs the candidate. It runs in the device process and holds what a candidate
would want to forge: the inputs (drawn from a secret salted seed), the reference products, the
comparison and the clock. The candidate's module runs in a runner (runner.py, kernel_role.py), a
throw-away caged process started ahead of need by the device's
:class:`~codevolve.evaluator_workers.gpu.runner_link.RunnerPool` (the one KernelBench judging
uses) and ended after this judging. Its buffers are the judge's: they live in the judge's arena,
and the runner is stopped whenever the judge writes or reads them.

:func:`measure` checks every shape of ``check_shapes`` and then of ``shapes`` on three
distributions (kernel_bench.py); the first wrong shape ends the judging. It then times every
shape of ``shapes`` in timed batches (kernel_timing.py), ends the candidate's runner, and times
cuBLAS through the same path in a runner of its own.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import importlib.metadata
import random
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from codevolve.core.measurement import quantile
from codevolve.evaluator_workers.gpu.cuda_device import device_info
from codevolve.evaluator_workers.gpu.remote import (
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
from codevolve.problems.gemm_kernel_gpu.device.kernel_role import ROLE
from codevolve.problems.gemm_kernel_gpu.device.kernel_timing import (
    Batch,
    Plan,
    ask_stopped,
    batch_size,
    reference_ms,
    stop,
    timed_batches,
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
    source: str, settings: MeasureSettings, *, device: str, runners: RunnerPool
) -> dict[str, Any]:
    """Judge ``source`` on ``device`` ("cuda" or "cpu"); plain data (kernel_jobs.py's format)."""
    reply: dict[str, Any] = {
        "device": {**device_info(device), "triton": triton_version()},
        "load_error": "",
        "problems": [],
        "timings": [],
        "compiled_ahead": 0,  # kernels compile in the candidate's runner
        "isolation": {},
        "seconds": {"start": 0.0, "check": 0.0, "time": 0.0, "reference": 0.0},
    }
    refused = dunder_problem(source) if runners.settings.rules else ""
    if refused:
        reply["load_error"] = refused
        return reply
    judging = _Judging(source, settings, device, runners)
    started = time.perf_counter()
    try:
        judging.start()
        reply["isolation"] = judging.layers
        reply["seconds"]["start"] = _lap(reply, "start", started)
        judging.check(reply["problems"])
        reply["load_s"] = time.perf_counter() - started  # start, load, compile, check
        _lap(reply, "check", started)
        if settings.time and not (reply["problems"] and reply["problems"][-1]):
            reply["timings"] = judging.time(reply)
    except LoadFailed as exc:
        reply["load_error"] = str(exc)
    except CandidateProblem as exc:  # before the first call: attaching, loading
        reply["load_error"] = str(exc)
    finally:
        judging.close()
    return reply


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


class _Judging:
    """One candidate's judging: its arena, its runner, the reference's runner after it."""

    def __init__(
        self, source: str, settings: MeasureSettings, device: str, runners: RunnerPool
    ) -> None:
        self.source = source
        self.settings = settings
        self.device = device
        self.runners = runners
        self.rng = random.Random(f"{settings.seed}-{secrets.randbits(62)}")  # secret inputs
        self.num_sms = (
            int(torch.cuda.get_device_properties(0).multi_processor_count)
            if device == "cuda"
            else CPU_SMS
        )
        self.plans = {shape: self._plan(shape) for shape in settings.shapes}
        self.arena: Arena | None = None
        self.remote: Remote | None = None
        self.layers: dict[str, bool] = {}

    def _plan(self, shape: Shape) -> Plan:
        took = reference_ms(shape, self.device) if self.settings.time else 1.0
        batch = batch_size(shape, took, self.device)
        return Plan(batch, self.settings.warmup, self.settings.samples)

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
            self.runners, self.arena, self.source, trusted=False, role=ROLE, who=ENTRY_POINT
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

    def time(self, reply: dict[str, Any]) -> list[dict[str, Any]]:
        """Every shape timed: the candidate's batches, then cuBLAS's in a runner of its own."""
        assert self.remote is not None
        started = time.perf_counter()
        timed = {shape: _Timed(plan) for shape, plan in self.plans.items()}
        for shape, row in timed.items():
            try:
                self._batches(self.remote, shape, row, check=True)
            except CandidateProblem as exc:
                status = "incorrect" if str(exc).startswith("timed batch") else "error"
                row.failure = Timing(status=status, detail=str(exc)[:2000])
                break
        reply["seconds"]["time"] = time.perf_counter() - started
        self.remote.close()
        self.remote = None
        started = time.perf_counter()
        self._time_reference([(s, r) for s, r in timed.items() if r.candidate])
        reply["seconds"]["reference"] = time.perf_counter() - started
        return [_row(row) for row in timed.values()]

    def _batches(self, remote: Remote, shape: Shape, row: _Timed, *, check: bool) -> list[float]:
        assert self.arena is not None
        self.arena.reset()
        sets = [InputSet.place(self.arena, shape) for _ in range(row.plan.batch)]
        elements = workspace_elements(shape[0], shape[1], self.device)
        batch = Batch(sets, Workspace.place(self.arena, elements), salt=self.rng.getrandbits(62))
        batch.stage(remote, self.num_sms)
        times = timed_batches(remote, batch, row.plan, check=check)
        if check:
            row.graph, row.why, row.candidate = batch.graph, batch.why, times
        else:
            row.cublas = times
        return times

    def _time_reference(self, rows: list[tuple[Shape, _Timed]]) -> None:
        if not rows:
            return
        assert self.arena is not None
        remote = start_remote(self.runners, self.arena, "", trusted=True, role=ROLE, who="cuBLAS")
        try:
            stop(remote)
            for shape, row in rows:
                self._batches(remote, shape, row, check=False)
        except CandidateProblem as exc:  # trusted code: the device or the judge is at fault
            raise RuntimeError(f"timing cuBLAS failed: {exc}") from None
        finally:
            remote.close()

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
