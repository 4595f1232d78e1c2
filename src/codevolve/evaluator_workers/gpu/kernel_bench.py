"""The trusted harness that checks and times a candidate's GEMM kernel against cuBLAS.

The candidate is a launch function ``matmul(x, w, y, workspace, num_sms)`` that must write
``y = x @ w.T`` (x [M, K], w [N, K], y [M, N], bf16; fp32 accumulation) using only ``workspace``
(fp32, at least :func:`workspace_elements` elements, contents undefined) as scratch. The harness
owns every buffer, the stream, the clocks and the reference; what each check catches:

- a wrong result: fresh inputs from three distributions (normal, uniform, small integers, the
  last bit-exact since fp32 accumulation is exact there), each time into an output prefilled with
  NaN inside a NaN guard band: every element written, finite, within bf16 tolerance;
- writes outside the output (the guard rows of y and of the workspace keep their NaN) and writes
  to the inputs (x and w compared with copies after the launch);
- reads of uninitialised memory: the workspace is poisoned with NaN before every launch, so a
  split-K that accumulates into scratch it did not clear produces NaN;
- work moved off the timed stream or onto another thread: the output is compared on the timed
  stream right after the call returns, without a device-wide synchronisation, so work still
  running elsewhere leaves NaN behind; and a call that leaves a new thread alive fails;
- results cached across calls: every timed round draws fresh inputs into the same buffers, and
  each round's timed output is compared (on a fresh random sample of rows) with the output of the
  cuBLAS call timed in the same round.

Timing is gemm_bench's protocol: GPU kept busy before each shape, cold L2 (a flush of at least
256 MiB before each timed launch; see :data:`FLUSHES`), CUDA events, candidate and cuBLAS
alternating, medians. Each timed launch waits behind a GPU-side spin, so the host has queued it
before the GPU gets there; a round where the GPU got there first is late (its interval may hold
host time) and is left out (:data:`LATE_SHARE`). A kernel that hangs is ended by the device
process's timeout (the process is recycled).

Imported only in the device process (needs torch and Triton).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import torch

from codevolve.evaluator_workers.errors import WorkerError
from codevolve.evaluator_workers.gpu.gemm_bench import (
    ATOL_OF_RMS,
    FLUSH_MIN_BYTES,
    RTOL,
    SHAPE_WARMUP_S,
    WARMUP_FLUSHES,
    WARMUP_LAUNCHES,
    Shape,
    Timing,
    alternating_timing,
)
from codevolve.evaluator_workers.gpu.kernel_loader import Launch

GUARD_ROWS = 1  # NaN rows above and below y
WORKSPACE_GUARD = 4096  # NaN elements after the workspace
CHECKED_ROWS = 64  # rows of each timed output compared with cuBLAS's
MIN_WORKSPACE = 1 << 24  # elements (64 MiB of fp32)
# A measurement whose cuBLAS median is this much above the fastest cuBLAS median this process has
# seen for the shape is taken again (up to RETRIES times): on the H200, rounds of a few
# microseconds sometimes ran 3x slower for cuBLAS and candidate alike (clock drops), and the
# ratio of two such times is not the ratio of the kernels.
SLOW_CUBLAS = 1.2
RETRIES = 2
# GPU clock cycles (about 0.2 ms on an H200) spent spinning before each cold-L2 flush of a timed
# round, so that the host has queued the timed launch and its events long before the GPU reaches
# them. Without it a timed round queues about fifteen small kernels besides the timed ones
# (fresh inputs, poisoning, the output check), the GPU can drain the queue while the host is still
# in the candidate's Python launch code, and the events then time launch latency: cuBLAS on
# 70B_tp8.qkv M=1 measured 14 us in one process and 39-45 us in others.
LEAD_CYCLES = 400_000
# A timed round is late when the GPU had already passed the round's start event by the time the
# host finished queuing the timed work (the candidate's call returned, or torch.matmul did): the
# GPU may then have idled waiting for the host, and the interval holds host time. Late rounds are
# left out of the medians; when more than LATE_SHARE of the rounds are late, the lead doubles (up
# to MAX_LEAD_CYCLES, kept for the rest of the process) and the rounds are run again. Past that
# cap the rounds count as they are: a launch whose host code outruns a ~2 ms lead is slow.
LATE_SHARE = 0.2
MAX_LEAD_CYCLES = 16 * LEAD_CYCLES
# How the L2 is left before a timed launch. "dirty" (the default, as triton.testing.do_bench and
# gemm_bench flush): a buffer of 4x the L2 is written, so the L2 is full of dirty lines and the
# timed kernel's first reads pay their write-back too; on an H100 that added about 6 us to
# cuBLAS on 8B.qkv M=1 (28.4 us against 22.2; bench/gpu_kernel_probe.py). "clean": the same
# write, then a read of another buffer of 2x the L2, so the kernel finds clean lines only (as
# after kernels that mostly read). Both sides of a ratio are timed after the same flush; the
# fixed cost of the dirty one brings short kernels' ratios closer to 1.
FLUSHES = ("dirty", "clean")


class CandidateFault(WorkerError):
    """The candidate's host code raised (a Python error, a Triton compile error), or left work
    behind; caught inside the harness and reported as the shape's problem, never propagated."""


def workspace_elements(m: int, n: int) -> int:
    """fp32 scratch a candidate may use: four partial outputs, and at least 64 MiB."""
    return max(4 * m * n, MIN_WORKSPACE)


@dataclass(slots=True)
class Buffers:
    """One shape's buffers: inputs, the guarded output and the guarded workspace."""

    x: torch.Tensor
    w: torch.Tensor
    guarded_y: torch.Tensor
    guarded_ws: torch.Tensor

    @property
    def y(self) -> torch.Tensor:
        return self.guarded_y[GUARD_ROWS : GUARD_ROWS + self.x.shape[0]]

    @property
    def workspace(self) -> torch.Tensor:
        return self.guarded_ws[: self.guarded_ws.numel() - WORKSPACE_GUARD]

    def poison(self) -> None:
        self.guarded_y.fill_(math.nan)
        self.guarded_ws.fill_(math.nan)

    def guards_problem(self) -> str:
        m = self.x.shape[0]
        rows = torch.cat([self.guarded_y[:GUARD_ROWS], self.guarded_y[GUARD_ROWS + m :]])
        if not bool(torch.isnan(rows).all()):
            return "wrote outside the output"
        if not bool(torch.isnan(self.guarded_ws[-WORKSPACE_GUARD:]).all()):
            return "wrote past the end of the workspace"
        return ""


def shape_buffers(shape: Shape) -> Buffers:
    m, n, k = shape
    ws = workspace_elements(m, n) + WORKSPACE_GUARD
    return Buffers(
        x=torch.empty((m, k), dtype=torch.bfloat16, device="cuda"),
        w=torch.empty((n, k), dtype=torch.bfloat16, device="cuda"),
        guarded_y=torch.empty((m + 2 * GUARD_ROWS, n), dtype=torch.bfloat16, device="cuda"),
        guarded_ws=torch.empty(ws, dtype=torch.float32, device="cuda"),
    )


def _fill(buffers: Buffers, distribution: str, gen: torch.Generator) -> None:
    """Fresh inputs in place: the same addresses, new values, no temporary tensors (an
    allocation inside the timed loop can stall the queue while the allocator frees and maps)."""
    k = buffers.x.shape[1]
    if distribution == "small integers":
        buffers.x.random_(-2, 3, generator=gen)
        buffers.w.random_(-2, 3, generator=gen)
        return
    if distribution == "uniform":
        buffers.x.uniform_(-1.0, 1.0, generator=gen)
    else:
        buffers.x.normal_(generator=gen)
    buffers.w.normal_(std=1 / math.sqrt(k), generator=gen)


def _tolerance_problem(y: torch.Tensor, ref: torch.Tensor, atol: float) -> str:
    error = (y.float() - ref).abs()
    bad = ~(error <= RTOL * ref.abs() + atol)  # NaN compares false: counted bad
    if bool(bad.any()):
        return f"{int(bad.sum())} elements wrong or unwritten (max error {float(error.max()):.3g})"
    return ""


class KernelBench:
    """Checks and times launch functions on the GPU this process holds."""

    def __init__(self, flush: str = "dirty") -> None:
        if flush not in FLUSHES:
            raise ValueError(f"unknown flush {flush!r}: one of {', '.join(FLUSHES)}")
        props = torch.cuda.get_device_properties(0)
        self.num_sms = int(props.multi_processor_count)
        flush_bytes = max(FLUSH_MIN_BYTES, 4 * props.L2_cache_size)
        self._flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
        self._clean = (
            torch.ones(2 * props.L2_cache_size // 4, dtype=torch.int32, device="cuda")
            if flush == "clean"
            else None
        )
        self._fastest_cublas: dict[Shape, float] = {}  # microseconds, per shape
        self.lead_cycles = LEAD_CYCLES
        self.late_rounds = 0  # late rounds seen over this object's life (each pass counted)

    def call(self, launch: Launch, buffers: Buffers) -> None:
        """One call of the candidate on the current stream; its own errors become a fault."""
        threads = threading.active_count()
        try:
            launch(buffers.x, buffers.w, buffers.y, buffers.workspace, self.num_sms)
        except Exception as exc:
            torch.cuda.synchronize()  # a CUDA fault raises here and recycles the process
            raise CandidateFault(f"{type(exc).__name__}: {str(exc)[:300]}") from exc
        if threading.active_count() != threads:
            raise CandidateFault("the launch left a thread running (work off the timed stream)")

    def check(self, launch: Launch, shape: Shape, gen: torch.Generator) -> str:
        """Why ``launch`` is wrong on ``shape`` (fresh inputs, three distributions), or ""."""
        buffers = shape_buffers(shape)
        for distribution in ("normal", "uniform", "small integers"):
            _fill(buffers, distribution, gen)
            x0, w0 = buffers.x.clone(), buffers.w.clone()
            ref = buffers.x.float() @ buffers.w.float().t()
            atol = ATOL_OF_RMS * float(ref.pow(2).mean().sqrt())
            buffers.poison()
            try:
                self.call(launch, buffers)
            except CandidateFault as fault:
                return f"{distribution}: {fault}"
            # No synchronisation before this line: on the timed stream, after the call returned.
            wrong = _tolerance_problem(buffers.y, ref, atol)
            if not wrong and distribution == "small integers":
                exact = buffers.y == ref.to(torch.bfloat16)
                wrong = "" if bool(exact.all()) else f"{int((~exact).sum())} elements not exact"
            wrong = wrong or buffers.guards_problem()
            if not wrong and not (torch.equal(buffers.x, x0) and torch.equal(buffers.w, w0)):
                wrong = "the launch changed its inputs"
            if wrong:
                return f"{distribution}: {wrong}"
        return ""

    def time(self, launch: Launch, shape: Shape, gen: torch.Generator, *, samples: int) -> Timing:
        """Median time of ``launch`` and of cuBLAS, alternating, fresh inputs every round; the
        round's timed output is checked against the round's cuBLAS output. Taken again when
        cuBLAS ran slow (:data:`SLOW_CUBLAS`)."""
        for _ in range(RETRIES):
            timing = self._time_once(launch, shape, gen, samples=samples)
            fastest = self._fastest_cublas.get(shape, math.inf)
            self._fastest_cublas[shape] = min(fastest, timing.cublas_us)
            if timing.status != "ok" or timing.cublas_us <= SLOW_CUBLAS * fastest:
                return timing
        return self._time_once(launch, shape, gen, samples=samples)

    def _time_once(
        self, launch: Launch, shape: Shape, gen: torch.Generator, *, samples: int
    ) -> Timing:
        # Return the previous shapes' blocks before allocating this one's: a fragmented cache
        # would allocate (and synchronise) between timed rounds. Measured: evaluations at the end
        # of a long process ran up to 3x slower for candidate and cuBLAS alike without it.
        torch.cuda.empty_cache()
        buffers = shape_buffers(shape)
        self.warm_up()
        _fill(buffers, "normal", gen)
        buffers.poison()
        try:
            for _ in range(WARMUP_LAUNCHES):
                self.call(launch, buffers)
                torch.matmul(buffers.x, buffers.w.t())
        except CandidateFault as fault:
            return Timing(status="error", detail=str(fault))
        return self.timed_rounds(launch, buffers, gen, samples=samples)

    def timed_rounds(
        self, launch: Launch, buffers: Buffers, gen: torch.Generator, *, samples: int
    ) -> Timing:
        """``samples`` alternating rounds on warm buffers: fresh inputs, a GPU-side lead and a
        cold L2 before each timed launch, each round's output checked against its cuBLAS's.
        Late rounds (:data:`LATE_SHARE`) are left out, or the rounds rerun with a longer lead."""
        while True:
            outcome = self._rounds(launch, buffers, gen, samples)
            if isinstance(outcome, Timing):
                return outcome  # the candidate failed or was wrong
            events, late = outcome
            self.late_rounds += len(late)
            few_late = len(late) <= LATE_SHARE * samples
            if few_late or self.lead_cycles >= MAX_LEAD_CYCLES:
                on_time = [r for r in range(samples) if r not in late] if few_late else None
                return alternating_timing(events, samples, on_time)
            self.lead_cycles *= 2

    def _rounds(
        self, launch: Launch, buffers: Buffers, gen: torch.Generator, samples: int
    ) -> Timing | tuple[list[torch.cuda.Event], set[int]]:
        """One pass of the rounds: their events and the late ones, or the failure."""
        m = buffers.x.shape[0]
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4 * samples)]  # type: ignore[no-untyped-call]
        problems: list[torch.Tensor] = []
        late: set[int] = set()
        for rep in range(samples):
            _fill(buffers, "normal", gen)
            buffers.poison()
            e = events[4 * rep : 4 * rep + 4]
            self._cold_start()
            e[0].record()
            try:
                self.call(launch, buffers)
            except CandidateFault as fault:
                return Timing(status="error", detail=str(fault))
            if e[0].query():  # type: ignore[no-untyped-call]
                late.add(rep)
            e[1].record()
            self._cold_start()
            e[2].record()
            ref = torch.matmul(buffers.x, buffers.w.t())
            if e[2].query():  # type: ignore[no-untyped-call]
                late.add(rep)
            e[3].record()
            rows = torch.randint(0, m, (min(m, CHECKED_ROWS),), generator=gen, device="cuda")
            problems.append(_bad_count(buffers.y[rows], ref[rows]))
        torch.cuda.synchronize()
        wrong = int(torch.stack(problems).sum())
        if wrong:
            detail = f"{wrong} checked elements of timed outputs wrong or unwritten"
            return Timing(status="incorrect", detail=detail)
        return events, late

    def _cold_start(self) -> None:
        """Queue a spin (the host's lead, :attr:`lead_cycles`) and an L2 flush."""
        torch.cuda._sleep(self.lead_cycles)  # type: ignore[no-untyped-call]
        self._flush.zero_()
        if self._clean is not None:
            torch.sum(self._clean, dtype=torch.int64)  # reads only: the L2 ends up clean

    def warm_up(self) -> None:
        end = time.perf_counter() + SHAPE_WARMUP_S
        while time.perf_counter() < end:
            for _ in range(20):
                self._flush.zero_()
            torch.cuda.synchronize()
        for _ in range(WARMUP_FLUSHES):
            self._flush.zero_()


def _bad_count(y: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Elements of y beyond bf16 tolerance of ref (cuBLAS's bf16 output), on the device."""
    ref32 = ref.float()
    atol = ATOL_OF_RMS * ref32.pow(2).mean().sqrt()
    # Two bf16 roundings apart at most: twice the tolerance the fp32 reference gets.
    ok = (y.float() - ref32).abs() <= 2 * (RTOL * ref32.abs() + atol)
    return (~ok).sum()
