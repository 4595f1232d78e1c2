"""Check and time the trusted Triton GEMM against cuBLAS on the GPU this process holds.

Protocol per (shape, config), research/gemm_gpu.md section 4.3:

- Correctness on fresh inputs drawn from several distributions (normal, uniform, small
  integers), each time into an output prefilled with NaN inside a NaN guard band: every element
  must be written, finite, within bf16 tolerance of an fp32 reference, and on small integers
  (where fp32 accumulation is exact) bit-equal to the reference rounded to bf16. Nothing outside
  the output may change.
- Timing on fresh normal inputs: a few warm-up launches, then ``samples`` rounds of
  [flush L2, candidate, flush L2, cuBLAS], each launch between two CUDA events. The L2 flush
  (writing a buffer four times the L2, at least 256 MiB) before each launch makes every rep read
  its weights from HBM, as in serving. Candidate and cuBLAS alternate, so drift hits both; the
  per-shape ratio of their medians is what scores.

Expected failures of a config (it does not compile, runs out of shared memory, is wrong) are
results. An exception during a launch is not: CUDA errors are sticky, so it propagates and the
device process is recycled.

Imported only in the device process (needs torch and Triton).
"""

from __future__ import annotations

import math
import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import torch
import triton

from codevolve.core.measurement import quantile
from codevolve.evaluator_workers.gpu.cuda_device import cuda_device_info
from codevolve.problems.gemm_tiling.gpu_timing import ATOL_OF_RMS, RTOL, Shape, Timing
from codevolve.problems.gemm_tiling_gpu.device.kernel import Config, compile_only, matmul

FLUSH_MIN_BYTES = 256 * 1024 * 1024
WARMUP_LAUNCHES = 3
# Flushes before each config's warm-up: ~8 ms of GPU work, so the clocks have left idle before
# the first timed sample, also for decode shapes whose launches take microseconds.
WARMUP_FLUSHES = 100
# Before each shape: keep the GPU busy this long (seconds). An idle H200 drops its SM clock to
# 345 MHz; measured without this, a decode shape timed right after an idle moment ran 3x slower.
SHAPE_WARMUP_S = 0.05


def device_info() -> dict[str, object]:
    return {**cuda_device_info(), "triton": triton.__version__}


def compile_config(config: Config) -> str:
    """Compile (and load) one config; the error text, empty when it compiled."""
    try:
        compile_only(config)
    except Exception as exc:  # noqa: BLE001 - Triton's compile errors share no root
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return ""


class GemmBench:
    """Holds the flush buffer, the compiled-config set and a measurement cache for one process.

    New configs are compiled in a pool of ``compile_workers`` processes (kept warm) into Triton's
    disk cache before this process loads them: a child with ten new configs costs one compile
    time, not ten.
    """

    def __init__(self, compile_workers: int = 0) -> None:
        self._pool = (
            ProcessPoolExecutor(compile_workers, mp_context=multiprocessing.get_context("spawn"))
            if compile_workers > 1
            else None
        )
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self._flush = torch.empty(
            max(FLUSH_MIN_BYTES, 4 * l2) // 4, dtype=torch.int32, device="cuda"
        )
        self._compiled: dict[Config, str] = {}  # config -> "" or the compile error
        self._cache: dict[tuple[Shape, Config], Timing] = {}

    def close(self) -> None:
        """Stop the compile workers."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def compile(self, config: Config) -> str:
        """Compile once per process; returns the error text, empty when it compiled."""
        if config not in self._compiled:
            self._compiled[config] = compile_config(config)
        return self._compiled[config]

    def compile_all(self, configs: Sequence[Config]) -> dict[Config, str]:
        """Compile the configs not compiled yet, in parallel when a pool is there; the errors."""
        missing = [c for c in dict.fromkeys(configs) if c not in self._compiled]
        if self._pool is not None and len(missing) > 1:
            list(self._pool.map(compile_config, missing))  # fills the disk cache
        return {c: e for c in configs if (e := self.compile(c))}

    def measure(
        self,
        pairs: Sequence[tuple[Shape, Config]],
        *,
        seed: int,
        samples: int,
        check: bool = True,
        use_cache: bool = True,
    ) -> list[Timing]:
        """Timings of ``pairs`` in order; pairs of one shape share that shape's inputs."""
        results: dict[int, Timing] = {}
        by_shape: dict[Shape, list[int]] = {}
        for i, (shape, config) in enumerate(pairs):
            cached = self._cache.get((shape, config)) if use_cache else None
            if cached is not None:
                results[i] = cached
            else:
                by_shape.setdefault(shape, []).append(i)
        self.compile_all([pairs[i][1] for indices in by_shape.values() for i in indices])
        for number, (shape, indices) in enumerate(by_shape.items()):
            configs = list(dict.fromkeys(pairs[i][1] for i in indices))
            timings = self._measure_shape(
                shape, configs, seed=seed * 1000 + number, samples=samples, check=check
            )
            for config, timing in zip(configs, timings, strict=True):
                self._cache[(shape, config)] = timing
            for i in indices:
                results[i] = self._cache[(shape, pairs[i][1])]
        return [results[i] for i in range(len(pairs))]

    def _measure_shape(
        self, shape: Shape, configs: list[Config], *, seed: int, samples: int, check: bool
    ) -> list[Timing]:
        gen = torch.Generator(device="cuda")
        gen.manual_seed(seed)
        self._warm_up()
        out: list[Timing] = []
        checks = _CheckInputs(shape, gen) if check else None
        m, n, k = shape
        x = torch.randn((m, k), generator=gen, device="cuda").to(torch.bfloat16)
        w = (torch.randn((n, k), generator=gen, device="cuda") / math.sqrt(k)).to(torch.bfloat16)
        for config in configs:
            error = self.compile(config)
            if error:
                out.append(Timing(status="compile_error", detail=error))
                continue
            if checks is not None:
                problem = checks.problem_of(config)
                if problem:
                    out.append(Timing(status="incorrect", detail=problem))
                    continue
            out.append(self._time(x, w, config, samples))
        return out

    def _warm_up(self) -> None:
        end = time.perf_counter() + SHAPE_WARMUP_S
        while time.perf_counter() < end:
            for _ in range(20):
                self._flush.zero_()
            torch.cuda.synchronize()

    def _time(self, x: torch.Tensor, w: torch.Tensor, config: Config, samples: int) -> Timing:
        y = torch.empty((x.shape[0], w.shape[0]), dtype=torch.bfloat16, device="cuda")
        for _ in range(WARMUP_FLUSHES):
            self._flush.zero_()
        for _ in range(WARMUP_LAUNCHES):
            matmul(x, w, y, config)
            torch.matmul(x, w.t())
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4 * samples)]  # type: ignore[no-untyped-call]
        for rep in range(samples):
            e = events[4 * rep : 4 * rep + 4]
            self._flush.zero_()
            e[0].record()
            matmul(x, w, y, config)
            e[1].record()
            self._flush.zero_()
            e[2].record()
            torch.matmul(x, w.t())
            e[3].record()
        torch.cuda.synchronize()
        return alternating_timing(events, samples)


class _CheckInputs:
    """Fresh inputs of one shape in three distributions, with their fp32 references."""

    def __init__(self, shape: Shape, gen: torch.Generator) -> None:
        m, n, k = shape
        normal_x = torch.randn((m, k), generator=gen, device="cuda")
        normal_w = torch.randn((n, k), generator=gen, device="cuda") / math.sqrt(k)
        uniform_x = torch.rand((m, k), generator=gen, device="cuda") * 2 - 1
        int_x = torch.randint(-2, 3, (m, k), generator=gen, device="cuda").float()
        int_w = torch.randint(-2, 3, (n, k), generator=gen, device="cuda").float()
        self.cases = []
        for name, x, w, exact in (
            ("normal", normal_x, normal_w, False),
            ("uniform", uniform_x, normal_w, False),
            ("small integers", int_x, int_w, True),
        ):
            xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
            ref = xb.float() @ wb.float().t()
            self.cases.append((name, xb, wb, ref, exact))
        self.shape = shape

    def problem_of(self, config: Config) -> str:
        """Why ``config``'s output is wrong on some distribution, or "" when it is right."""
        m, n, _ = self.shape
        for name, x, w, ref, exact in self.cases:
            guarded = torch.full((m + 2, n), math.nan, dtype=torch.bfloat16, device="cuda")
            y = guarded[1 : m + 1]
            matmul(x, w, y, config)
            torch.cuda.synchronize()
            if not (torch.isnan(guarded[0]).all() and torch.isnan(guarded[m + 1]).all()):
                return f"{name}: wrote outside the output"
            if not torch.isfinite(y).all():
                return f"{name}: {int((~torch.isfinite(y)).sum())} elements unwritten or not finite"
            if exact:
                if not torch.equal(y, ref.to(torch.bfloat16)):
                    bad = int((y != ref.to(torch.bfloat16)).sum())
                    return f"{name}: {bad} elements differ from the exact result"
                continue
            atol = ATOL_OF_RMS * float(ref.pow(2).mean().sqrt())
            error = (y.float() - ref).abs()
            if not bool((error <= RTOL * ref.abs() + atol).all()):
                return f"{name}: max error {float(error.max()):.3g} beyond tolerance"
        return ""


def alternating_timing(
    events: Sequence[torch.cuda.Event], samples: int, rounds: Sequence[int] | None = None
) -> Timing:
    """The timing of ``samples`` rounds recorded as four CUDA events each (candidate start, end,
    cuBLAS start, end), after the stream was synchronised: medians and 20/80 % quantiles over
    ``rounds`` (default: all of them)."""
    kept = range(samples) if rounds is None else rounds
    ours = [events[4 * r].elapsed_time(events[4 * r + 1]) * 1e3 for r in kept]
    ref = [events[4 * r + 2].elapsed_time(events[4 * r + 3]) * 1e3 for r in kept]
    return Timing(
        status="ok",
        t_us=quantile(ours, 0.5),
        p20_us=quantile(ours, 0.2),
        p80_us=quantile(ours, 0.8),
        cublas_us=quantile(ref, 0.5),
        samples=len(ours),
    )
