"""gemm-kernel-gpu: every kernel launch on every selection shape, and the program chosen from it.

    python bench/gpu_kernel_tune.py sweep --out sweep.json [--samples 5] [--jobs 14]
            [--only PART;PART] [--max-m M]
        Each candidate launch of LAUNCHES (per M range) on each train and validation shape, never
        a test shape: every launch first run once per shape in --jobs processes (they fill
        Triton's disk cache), then per shape every launch checked on fresh inputs (three
        distributions) and timed against cuBLAS in the harness's alternating rounds. --only and
        --max-m keep some shapes (a partial sweep, merged with full ones by compose).
    python bench/gpu_kernel_tune.py sweep --heldout --out heldout.json
        The same launches on the 44 test shapes, for one purpose only: ``selection`` below. Its
        report says so, and every command that chooses refuses it.
    python bench/gpu_kernel_tune.py compose --sweep sweep.json --program tuned.txt [--fresh V]
        (no GPU) Per projection, dispatch rules by M: at a selection M the launch fastest there,
        at any other M the wave model's choice from the selection Ms on either side
        (dispatch_rules), merged where the launch repeats.
    python bench/gpu_kernel_tune.py assess --sweep sweep.json
        (no GPU) Each selection M held out in turn: how close each way of choosing comes to the
        best launch measured there.
    python bench/gpu_kernel_tune.py gains --sweep sweep.json --variants V [V...] [--fresh V]
        (no GPU) Where the named variants' launches are the fastest and by how much, and the
        best launch per shape with and without them.
    python bench/gpu_kernel_tune.py l2 --sweep sweep.json [--min-m 192]
        (no GPU) Per shape, the fastest launch and the rate its tiles read from L2 into the SMs
        (no two of our tiles share a load; cuBLAS shares them across a cluster).
    python bench/gpu_kernel_tune.py selection --sweep sweep.json --heldout heldout.json
        (no GPU) Per test shape, the launch the composed program chooses (from the selection
        sweeps alone) against the best launch the held-out sweep measured there: how much of the
        test split's gap to cuBLAS is the choice, and how much the kernels.

A sweep report may be xz-compressed (``sweep.json.xz``, as data/gemm_kernel_gpu/sweeps/ keeps
them). Selection sees the 44 train and 96 validation shapes; the 44 test shapes are measured
first by ``bench/gpu_kernel.py evaluate``, and by a held-out sweep that nothing chooses from.
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import multiprocessing
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codevolve.problems.gemm_kernel_gpu.kernel_source import (
    VARIANTS,
    add_rule,
    apply_hunks,
    initial_program,
)
from codevolve.problems.gemm_tiling.shapes import (
    PROJECTIONS,
    GemmShape,
    heldout_shapes,
    train_shapes,
    validation_shapes,
)

Launch = tuple[str, tuple[int, ...]]  # (variant, parameters)


def _grid(name: str, *params: tuple[int, ...]) -> list[Launch]:
    return [(name, p) for p in params]


# Candidate launches per M range (lowest M, highest M): tile shapes and depths a kernel engineer
# would try on Hopper for each regime, the same for every projection.
LAUNCHES: list[tuple[int, int, list[Launch]]] = [
    (1, 16, [
        *_grid("plain", *((16, n, 128, w, s, 1) for n in (32, 64, 128) for w in (2, 4)
                          for s in (3, 5))),
        *_grid("plain", (16, 64, 64, 4, 5, 1), (16, 32, 64, 2, 5, 1)),
        *_grid("split_k", *((16, n, 128, 4, 4, k) for n in (32, 64, 128) for k in (2, 4, 8))),
        *_grid("split_k", (16, 32, 128, 2, 5, 4), (16, 64, 128, 4, 3, 16)),
        *_grid("split_k_fused", *((16, n, 128, 4, 4, k) for n in (32, 64, 128)
                                  for k in (2, 4, 8))),
        *_grid("split_k_fused", (16, 32, 128, 2, 5, 4), (16, 64, 128, 4, 3, 16)),
        *_grid("tail_split", (16, 32, 128, 4, 4, 1), (16, 64, 128, 4, 4, 1),
               (16, 128, 128, 4, 4, 1), (16, 64, 128, 4, 5, 1)),
        *_grid("persistent", (16, 64, 128, 4, 5, 1)),
        *_grid("gemv", *((r, n, k, w, 3) for r in (1, 4) for n, k, w in (
            (16, 512, 4), (16, 256, 4), (32, 256, 4), (8, 512, 4), (16, 512, 8), (32, 512, 8)))),
        *_grid("gemv", (4, 32, 128, 4, 3), (1, 16, 512, 4, 2), (1, 16, 512, 4, 4)),
        # Deeper pipelines (as for the larger M: sweep_h100_run15): more of w in flight.
        *_grid("plain", (16, 64, 128, 4, 8, 1), (16, 128, 128, 4, 6, 1)),
        *_grid("split_k", (16, 64, 128, 4, 8, 4), (16, 32, 128, 2, 10, 4)),
    ]),
    (17, 1024, [
        *_grid("plain", *((m, n, k, 4, s, 8) for m, n in ((32, 64), (64, 64), (64, 128))
                          for k in (64, 128) for s in (3, 4))),
        *_grid("plain", (128, 128, 64, 4, 3, 8), (128, 128, 64, 4, 4, 8), (128, 128, 64, 8, 4, 8),
               (64, 256, 64, 8, 3, 8)),
        *_grid("tma", (64, 128, 64, 4, 4, 8), (64, 128, 128, 4, 3, 8), (128, 128, 64, 4, 4, 8),
               (128, 128, 64, 8, 4, 8), (128, 256, 64, 8, 3, 8), (64, 256, 64, 4, 3, 8)),
        # One of the plain kernel's most frequent mid-size winners (64x128 tiles, 128-wide K
        # steps, four stages; 9 of the 72 mid-size shapes in the first H200 sweep) in the TMA
        # kernels too.
        *_grid("tma", (64, 128, 128, 4, 4, 8)),
        *_grid("tma_persistent", (64, 128, 128, 4, 4, 8, 1)),
        *_grid("persistent_stream_k", (64, 128, 128, 4, 4, 8, 1)),
        *_grid("persistent_stream_k_fused", (64, 128, 128, 4, 4, 8, 1)),
        # Tiles 96, 144 and 192 wide (cuBLAS's widths on the mid-size shapes where it fills one
        # wave and our power-of-two tiles do not: docs/results-gpu-kernel.md).
        *_grid("tma_wide", (128, 64, 64, 4, 4, 8, 32), (128, 128, 64, 8, 4, 8, 64),
               (128, 128, 64, 8, 4, 8, 16), (64, 64, 64, 4, 4, 8, 32), (64, 128, 64, 4, 4, 8, 64)),
        # 160 wide: one wave of 128 tiles on 70B_tp8.qkv (N = 1280) at M = 1024 (64-row tiles)
        # and M = 2048 (128-row), where power-of-two tiles make 80 or 160 (both also in the
        # prefill launches, so that the wave model can carry them from 768 and 1536 to 1024),
        # 128-row ones also with 4 warps (1.4x faster than 8 in the wide probe).
        *_grid("tma_wide", (64, 128, 128, 4, 3, 8, 32), (128, 128, 64, 8, 4, 8, 32),
               (128, 128, 64, 4, 4, 8, 32), (128, 128, 64, 4, 4, 8, 16)),
        *_grid("tma_persistent", (128, 128, 64, 4, 4, 8, 1), (128, 256, 64, 8, 3, 8, 1),
               (64, 128, 64, 4, 4, 8, 1), (128, 128, 64, 8, 4, 8, 1)),
        *_grid("tail_split", (64, 64, 128, 4, 4, 8), (64, 128, 64, 4, 4, 8),
               (64, 256, 64, 4, 3, 8), (128, 128, 64, 4, 4, 8), (128, 128, 64, 8, 4, 8),
               (128, 256, 64, 8, 3, 8)),
        *_grid("split_k", (32, 64, 128, 4, 4, 2), (64, 64, 128, 4, 4, 2), (64, 64, 128, 4, 4, 4),
               (64, 128, 128, 4, 4, 2)),
        *_grid("split_k_fused", (32, 64, 128, 4, 4, 2), (64, 64, 128, 4, 4, 2),
               (64, 64, 128, 4, 4, 4), (64, 128, 128, 4, 4, 2)),
        *_grid("stream_k", (64, 128, 64, 4, 4, 8), (128, 128, 64, 4, 4, 8)),
        *_grid("persistent_tail", (128, 128, 64, 8, 4, 8, 1), (128, 256, 64, 8, 3, 8, 1),
               (64, 128, 64, 4, 4, 8, 1), (128, 128, 64, 4, 4, 8, 1)),
        *_grid("persistent_stream_k", (128, 128, 64, 8, 4, 8, 1), (128, 256, 64, 8, 3, 8, 1),
               (64, 128, 64, 4, 4, 8, 1), (128, 128, 64, 4, 4, 8, 1), (128, 256, 64, 8, 3, 8, 0),
               (64, 256, 64, 4, 3, 8, 1)),
        *_grid("persistent_stream_k_fused", (128, 128, 64, 8, 4, 8, 1), (128, 256, 64, 8, 3, 8, 1),
               (128, 128, 64, 4, 4, 8, 1), (128, 256, 64, 8, 3, 8, 0)),
        *_grid("persistent_tail_shared", (128, 256, 64, 8, 3, 8, 1), (128, 128, 64, 4, 4, 8, 1),
               (128, 128, 64, 8, 4, 8, 1), (64, 128, 64, 4, 4, 8, 1)),
        # Pipelines that fill the shared memory (about 192 KiB of stages), as cuBLAS's kernels
        # do on every mid-size and prefill selection shape (128x64 tiles 8 stages deep, 128x128
        # 6, 64x64 13, 256x128 4: $P/probe_cublas_h100.json), where the launches above stop at
        # 96-144 KiB. More loads in flight per SM where each waits longer for L2.
        *_grid("tma", (128, 128, 64, 4, 6, 8), (128, 64, 64, 4, 8, 8), (64, 128, 64, 4, 8, 8),
               (64, 64, 64, 4, 12, 8)),
        *_grid("tma_persistent", (128, 128, 64, 4, 6, 8, 1), (64, 128, 64, 4, 8, 8, 1)),
        *_grid("tail_split", (128, 128, 64, 4, 6, 8), (64, 128, 64, 4, 8, 8),
               (128, 256, 64, 8, 4, 8)),
        # The first sweep with them (sweep_h100_run15) put a deep launch fastest on 42 of the
        # 140 shapes; the rest of the kernels, and the depths around the winners, here.
        *_grid("tma", (128, 128, 64, 4, 7, 8), (64, 128, 64, 4, 9, 8), (64, 64, 64, 4, 14, 8),
               (64, 64, 128, 4, 6, 8)),
        *_grid("tma_persistent", (64, 64, 64, 4, 12, 8, 1), (128, 128, 64, 8, 6, 8, 1)),
        *_grid("tail_split", (64, 64, 64, 4, 12, 8)),
        *_grid("persistent_tail", (128, 128, 64, 4, 6, 8, 1)),
        *_grid("persistent_tail_shared", (128, 128, 64, 4, 6, 8, 1)),
        *_grid("persistent_stream_k", (128, 128, 64, 4, 6, 8, 1), (64, 128, 64, 4, 8, 8, 1)),
        *_grid("tma_wide", (128, 128, 64, 4, 5, 8, 16), (64, 64, 64, 4, 10, 8, 32)),
        # The 160-wide tiles above (one wave on 70B_tp8.qkv at M = 1024 and 2048), deep.
        *_grid("tma_wide", (128, 128, 64, 4, 5, 8, 32), (64, 128, 64, 4, 7, 8, 32)),
        *_grid("tma_persistent_wide", (128, 128, 64, 4, 5, 8, 0, 32)),
        *_grid("split_k", (64, 64, 128, 4, 6, 2), (64, 64, 128, 4, 6, 4)),
        *_grid("plain", (64, 64, 128, 4, 6, 8)),
    ]),
    (384, 8192, [
        *_grid("tma_persistent", *((128, 256, 64, 8, 3, g, f) for g in (4, 8) for f in (0, 1))),
        *_grid("tma_persistent", (128, 128, 64, 4, 4, 8, 1), (128, 128, 64, 8, 4, 8, 1),
               (256, 128, 64, 8, 3, 8, 1), (128, 128, 128, 8, 3, 8, 1), (128, 64, 64, 4, 4, 8, 1)),
        *_grid("tail_split", (128, 256, 64, 8, 3, 8), (128, 128, 64, 8, 4, 8),
               (128, 128, 64, 4, 4, 8), (128, 64, 64, 4, 4, 8), (64, 128, 64, 4, 4, 8)),
        *_grid("tma_persistent", (64, 256, 64, 4, 3, 8, 1)),
        *_grid("stream_k", (128, 128, 64, 8, 4, 8), (128, 256, 64, 8, 3, 8)),
        *_grid("tma", (128, 256, 64, 8, 3, 8), (128, 128, 64, 8, 4, 8)),
        *_grid("tma_wide", (128, 128, 64, 8, 4, 8, 64), (128, 128, 64, 8, 4, 8, 16),
               (128, 128, 64, 8, 4, 8, 32), (64, 128, 128, 4, 3, 8, 32),
               (128, 128, 64, 4, 4, 8, 32), (128, 128, 64, 4, 4, 8, 16)),
        *_grid("tma_persistent_wide", (128, 128, 64, 8, 4, 8, 1, 64),
               (128, 128, 64, 8, 4, 8, 1, 32), (128, 128, 64, 8, 4, 8, 0, 64),
               (128, 128, 64, 4, 4, 8, 0, 32)),
        *_grid("plain", (128, 256, 64, 8, 3, 8)),
        *_grid("persistent_tail", (128, 256, 64, 8, 3, 8, 1), (128, 256, 64, 8, 3, 4, 1),
               (128, 128, 64, 8, 4, 8, 1), (128, 128, 64, 4, 4, 8, 1), (256, 128, 64, 8, 3, 8, 1)),
        *_grid("persistent_stream_k", (128, 256, 64, 8, 3, 8, 1), (128, 256, 64, 8, 3, 4, 1),
               (128, 128, 64, 8, 4, 8, 1), (128, 128, 64, 4, 4, 8, 1), (128, 256, 64, 8, 3, 8, 0),
               (256, 128, 64, 8, 3, 8, 1)),
        *_grid("persistent_stream_k_fused", (128, 256, 64, 8, 3, 8, 1), (128, 256, 64, 8, 3, 4, 1),
               (128, 128, 64, 8, 4, 8, 1), (128, 128, 64, 4, 4, 8, 1)),
        *_grid("persistent_tail_shared", (128, 256, 64, 8, 3, 8, 1), (128, 128, 64, 4, 4, 8, 1),
               (128, 128, 64, 8, 4, 8, 1)),
        # The deeper pipelines (above) for the prefill tiles. The persistent kernels' 128x256
        # tiles keep 3 stages: with 4 their pipeline and epilogue ask 262,176 bytes of shared
        # memory (232,448 the H100's limit).
        *_grid("tma_persistent", (128, 128, 64, 4, 6, 8, 1), (128, 128, 64, 8, 6, 8, 1)),
        *_grid("tail_split", (128, 256, 64, 8, 4, 8), (128, 128, 64, 4, 6, 8)),
        *_grid("tma", (128, 256, 64, 8, 4, 8)),
        *_grid("persistent_tail_shared", (128, 128, 64, 4, 6, 8, 1)),
        *_grid("persistent_stream_k", (128, 128, 64, 4, 6, 8, 1)),
        *_grid("tma_wide", (128, 128, 64, 4, 5, 8, 32), (64, 128, 64, 4, 7, 8, 32)),
        *_grid("tma_persistent_wide", (128, 128, 64, 4, 5, 8, 0, 32)),
    ]),
]  # fmt: skip


def projection_dims() -> dict[str, tuple[int, int]]:
    """(N, K) of each projection, by name."""
    return {p.name: (p.n, p.k) for p in PROJECTIONS}


def launches_for(m: int) -> list[Launch]:
    seen: dict[Launch, None] = {}
    for low, high, launches in LAUNCHES:
        if low <= m <= high:
            seen.update(dict.fromkeys(launches))
    return list(seen)


def shape_launches(
    dims: tuple[int, int, int], choose: Callable[[int, int, int], tuple[int, ...]]
) -> list[Launch]:
    """The candidate launches of one shape: its M range's, then the initial program's own (its
    tiled kernel with the config ``choose``, its rule, picks), so that a composed program can
    keep what the starting program did where nothing measured beats it."""
    own = ("plain", tuple(choose(*dims)))
    return list(dict.fromkeys([*launches_for(dims[0]), own]))


def selection_shapes(heldout: bool = False) -> list[GemmShape]:
    """The train and validation shapes (or, with ``heldout``, the test shapes), by projection
    and M."""
    shapes = heldout_shapes() if heldout else train_shapes() + validation_shapes()
    return sorted(shapes, key=lambda s: (s.projection, s.m))


def sweep_program() -> str:
    """The initial program with every variant's kernels and launcher (never dispatched to: the
    sweep calls the launchers directly)."""
    source = initial_program()
    for name, variant in VARIANTS.items():
        hunks = add_rule(source, "False", variant, (0,) * len(variant.params))
        if hunks is None:
            raise SystemExit(f"cannot add the {name} variant")
        source = apply_hunks(source, hunks)
    return source


def shape_key(shape: GemmShape) -> str:
    return f"{shape.projection} M={shape.m}"


def _label(launch: Launch) -> str:
    return f"{launch[0]} {','.join(map(str, launch[1]))}"


def _unlabel(label: str) -> Launch:
    name, params = label.split(" ")
    return name, tuple(int(p) for p in params.split(","))


def _precompile(shapes: list[tuple[int, int, int]]) -> list[str]:
    """Every launch of each shape once, in this process: Triton compiles into its disk cache
    what the sweep's process then only loads."""
    import torch

    from codevolve.problems.gemm_kernel_gpu.device.kernel_bench import shape_buffers
    from codevolve.problems.gemm_kernel_gpu.device.kernel_loader import KernelLoader

    entry = KernelLoader().load(sweep_program())
    if not callable(entry):
        return [str(entry)]
    problems = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for dims in shapes:
        buffers = shape_buffers(dims)
        for name, params in shape_launches(dims, entry.__globals__["choose_config"]):
            try:
                entry.__globals__[f"launch_{name}"](
                    buffers.x, buffers.w, buffers.y, buffers.workspace, sms, *params
                )
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - reported; the sweep records it per shape
                problem = f"{_label((name, params))} {dims}: {type(exc).__name__}: {exc}"
                problems.append(problem[:300])
        del buffers
        torch.cuda.empty_cache()
    return problems


def precompile(shapes: list[GemmShape], processes: int) -> None:
    """Compile every launch of every shape, the shapes dealt round-robin to ``processes``
    processes (arguments Triton specialises on, such as a persistent grid's program count,
    depend on M: each shape is launched as it will be timed)."""
    started = time.perf_counter()
    dims = [(s.m, s.n, s.k) for s in sorted(shapes, key=lambda s: s.m * s.n)]
    chunks = [dims[i::processes] for i in range(processes)]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        problems = [p for found in pool.map(_precompile, chunks) for p in found]
    print(f"precompiled {len(dims)} shapes' launches in {time.perf_counter() - started:.0f} s "
          f"({processes} processes); {len(problems)} launches raised", flush=True)  # fmt: skip
    for problem in problems[:20]:
        print("  ", problem, flush=True)


def sweep(args: argparse.Namespace) -> None:
    import torch

    from codevolve.problems.gemm_kernel_gpu.device.kernel_bench import (
        CandidateFault,
        KernelBench,
        shape_buffers,
    )
    from codevolve.problems.gemm_kernel_gpu.device.kernel_loader import KernelLoader
    from codevolve.problems.gemm_tiling_gpu.device.gemm_bench import WARMUP_LAUNCHES, device_info

    shapes = selection_shapes(heldout=args.heldout)
    if args.only:
        shapes = [s for s in shapes if any(part in shape_key(s) for part in args.only.split(";"))]
    if args.max_m:
        shapes = [s for s in shapes if s.m <= args.max_m]
    if args.jobs > 1:
        precompile(shapes, args.jobs)
    bench = KernelBench()
    entry = KernelLoader().load(sweep_program())
    if not callable(entry):
        raise SystemExit(f"the sweep program does not load: {entry}")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    report: dict[str, Any] = {"device": device_info(), "samples": args.samples, "shapes": {}}
    if args.heldout:
        report[HELDOUT] = True
    started = time.perf_counter()
    for count, shape in enumerate(shapes, 1):
        dims = (shape.m, shape.n, shape.k)
        results: dict[str, Any] = {}
        torch.cuda.empty_cache()
        buffers = shape_buffers(dims)
        bench.warm_up()
        for launch in shape_launches(dims, entry.__globals__["choose_config"]):
            launcher = entry.__globals__[f"launch_{launch[0]}"]

            def call(x: Any, w: Any, y: Any, ws: Any, sms: int, _f: Any = launcher,
                     _p: tuple[int, ...] = launch[1]) -> Any:  # fmt: skip
                return _f(x, w, y, ws, sms, *_p)

            problem = bench.check(call, dims, gen)
            if problem:
                results[_label(launch)] = {"error": problem[:200]}
                continue
            try:
                for _ in range(WARMUP_LAUNCHES):
                    bench.call(call, buffers)
            except CandidateFault as fault:
                results[_label(launch)] = {"error": str(fault)[:200]}
                continue
            timing = bench.timed_rounds(call, buffers, gen, samples=args.samples)
            if timing.status != "ok":
                results[_label(launch)] = {"error": timing.detail[:200]}
                continue
            results[_label(launch)] = {"t_us": timing.t_us, "cublas_us": timing.cublas_us}
        report["shapes"][shape_key(shape)] = results
        report["late_rounds"], report["lead_cycles"] = bench.late_rounds, bench.lead_cycles
        _, timed = shape_ratios(results)
        if timed:
            best = max(timed, key=lambda label: timed[label])
            print(f"[{count}/{len(shapes)} {time.perf_counter() - started:.0f} s] "
                  f"{shape_key(shape)}: best {best} {timed[best]:.3f} of cuBLAS; "
                  f"{len(results) - len(timed)} of {len(results)} failed", flush=True)  # fmt: skip
        Path(args.out).write_text(json.dumps(report, indent=1))


def shape_ratios(results: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """One shape's sweep results: its cuBLAS time (the median over all its timed launches'
    rounds) and each timed launch's t_cuBLAS / t; NaN and nothing when no launch was timed."""
    timed = {k: v for k, v in results.items() if "t_us" in v}
    if not timed:
        return math.nan, {}
    cublas = statistics.median([v["cublas_us"] for v in timed.values()])
    return cublas, {label: cublas / v["t_us"] for label, v in timed.items()}


def read_report(path: str) -> dict[str, Any]:
    """A sweep report as ``sweep`` wrote it, or xz-compressed (``.xz``, as data/ stores them)."""
    if path.endswith(".xz"):
        with lzma.open(path, "rt") as compressed:
            report: dict[str, Any] = json.load(compressed)
            return report
    loaded: dict[str, Any] = json.loads(Path(path).read_text())
    return loaded


# The key a held-out sweep's report carries: read by ``selection`` alone, refused by read_sweeps.
HELDOUT = "heldout"


def read_sweeps(paths: list[str], fresh: tuple[str, ...] = ()) -> dict[str, Any]:
    """One sweep report from one or more: per shape and launch, the geomean of its ratios to the
    shape's cuBLAS over the sweeps that timed it, as a time against the last such sweep's cuBLAS
    (repeated sweeps average out their noise; launches only a later sweep has are kept, and
    shapes only some sweeps have: a sweep of a few shapes, ``--only``, adds to the others). The
    variants named in ``fresh`` (changed since the earlier sweeps) count from the last one only."""
    reports = [read_report(path) for path in paths]
    for path, report in zip(paths, reports, strict=True):
        if report.get(HELDOUT):
            raise SystemExit(
                f"{path} is a sweep of the held-out test shapes: only `selection --heldout` "
                "reads it; nothing chooses from it"
            )
    for report in reports[:-1]:
        report["shapes"] = {
            key: {label: v for label, v in results.items() if label.split()[0] not in fresh}
            for key, results in report["shapes"].items()
        }
    if len(reports) == 1:
        return reports[0]
    shapes: dict[str, dict[str, dict[str, float]]] = {}
    for key in dict.fromkeys(key for report in reports for key in report["shapes"]):
        per_launch: dict[str, list[float]] = defaultdict(list)
        cublas = math.nan
        for report in reports:
            shape_cublas, timed = shape_ratios(report["shapes"].get(key, {}))
            if timed:
                cublas = shape_cublas
                for label, ratio in timed.items():
                    per_launch[label].append(ratio)
        shapes[key] = {
            label: {"t_us": cublas / statistics.geometric_mean(values), "cublas_us": cublas}
            for label, values in per_launch.items()
        }
    return {**reports[-1], "shapes": shapes, "merged": paths}


def ratios(report: dict[str, Any]) -> dict[str, dict[int, dict[Launch, float]]]:
    """Per projection, per selection M, per launch that passed: t_cuBLAS / t (the shape's cuBLAS
    time is the median over all its launches' rounds)."""
    out: dict[str, dict[int, dict[Launch, float]]] = defaultdict(dict)
    for key, results in report["shapes"].items():
        projection, m = key.split(" M=")
        _, timed = shape_ratios(results)
        if timed:
            out[projection][int(m)] = {_unlabel(label): r for label, r in timed.items()}
    return dict(out)


def _best(candidates: list[dict[Launch, float]]) -> tuple[Launch, float]:
    """The launch with the best geomean over ``candidates`` (measured in all of them; there is
    one at least)."""
    common = set.intersection(*(set(c) for c in candidates))
    score = {
        launch: statistics.geometric_mean([c[launch] for c in candidates]) for launch in common
    }
    launch = max(sorted(score), key=lambda launch: score[launch])
    return launch, score[launch]


def _extend(runs: list[tuple[int, Launch]], high: int, launch: Launch) -> None:
    """Serve M up to ``high`` with ``launch`` too: the last run grows, or a new one starts."""
    runs[-1:] = [(high, launch)] if runs[-1][1] == launch else [runs[-1], (high, launch)]


MAX_M = 16384  # the wave model chooses for every M up to this; above it, the last choice holds


def dispatch_rules(report: dict[str, Any]) -> list[tuple[str, str, tuple[int, ...]]]:
    """Rules (condition, variant, parameters), first match wins, per projection and M range. At
    a selection M, the launch measured fastest there; at any other M, the wave model's choice
    from the selection Ms on either side (:func:`modelled_choice`), else the nearer one's best.
    Leaving each selection M out in turn, the wave model came closer to the best launch than
    the nearer neighbour's best (0.979 of it against 0.948, three H100 sweeps averaged; 0.975
    against 0.935, two H200 sweeps; past each projection's last M, 1.000 against 0.947 and 0.999
    against 0.925: ``assess``)."""
    dims = projection_dims()
    rules: list[tuple[str, str, tuple[int, ...]]] = []
    for projection, per_m in sorted(times(report).items()):
        n, k = dims[projection]
        runs: list[tuple[int, Launch]] = []
        for m in range(1, MAX_M + 1):
            launch = chosen_launch(per_m, m, n, k, ridge_of(report))
            if runs:
                _extend(runs, m, launch)
            else:
                runs.append((m, launch))
        for i, (high, launch) in enumerate(runs):
            last = i == len(runs) - 1
            bound = "" if last else f"M <= {high} and "
            rules.append((f"{bound}N == {n} and K == {k}", launch[0], launch[1]))
    return rules


def chosen_launch(
    per_m: dict[int, dict[Launch, float]], m: int, n: int, k: int, ridge: float
) -> Launch:
    """What a composed program runs at ``m`` (:func:`dispatch_rules`): the launch measured
    fastest there if ``m`` was measured, else the wave model's choice, else the nearer measured
    M's fastest."""

    def fastest(x: int) -> Launch:
        return min(per_m[x], key=lambda c: per_m[x][c])

    if m in per_m:
        return fastest(m)
    nearest = min(sorted(per_m), key=lambda x: abs(math.log(x / m)))
    return modelled_choice(per_m, m, n, k, ridge) or fastest(nearest)


SMS = 132  # the H100's and the H200's SM count: what the wave model fills
# Dense bf16 FLOP/s over HBM bytes/s: 989 T over 3.35 TB/s on the H100, over 4.8 TB/s on the H200.
RIDGE_H100, RIDGE_H200 = 295.0, 206.0


def ridge_of(report: dict[str, Any]) -> float:
    """The ridge point of the GPU a sweep report was measured on (the H100's unless an H200)."""
    return RIDGE_H200 if "H200" in report.get("device", {}).get("name", "") else RIDGE_H100


def reduction_waves(
    tail: int, splits: int, k: int, sms: int = SMS, ridge: float = RIDGE_H100
) -> float:
    """What summing ``tail`` tiles split ``splits`` ways costs, in tile times: their fp32
    partials (4 bytes an element) cross memory twice, against a tile's 2 * K flops an element
    on one SM of ``sms``: 4 * tail * splits * ridge / (K * sms)."""
    return 4 * tail * splits * ridge / (k * sms)


# Variants whose tiles are two dots wide along N: block_n (p[1]) + extra_n (their last parameter).
WIDE_VARIANTS = ("tma_wide", "tma_persistent_wide", "tma_wide_split")


def tile_width(launch: Launch) -> int:
    """A launch's tile extent along N."""
    name, p = launch
    return p[1] + p[-1] if name in WIDE_VARIANTS else p[1]


# What one block may ask of shared memory on the H100 and the H200 (bytes, opt-in).
SHARED_LIMIT = 232_448
# Persistent TMA kernels keep a tile's bf16 output in shared memory beside their pipeline (their
# next tile's loads are in flight while it is stored); one-tile kernels reuse the pipeline's.
STAGED_EPILOGUE = (
    "tma_persistent",
    "tma_persistent_wide",
    "persistent_tail",
    "persistent_tail_shared",
    "persistent_stream_k",
    "persistent_stream_k_fused",
)


def shared_bytes(launch: Launch) -> int:
    """Shared memory a tensor-core launch asks for: its stages of bf16 x and w blocks, plus the
    output tile for the persistent TMA kernels (under Triton 3.6 on the H100: 128x256 tiles
    4 deep in tma_persistent asked 262,176 bytes, this gives 262,144). Zero for gemv."""
    name, p = launch
    if name == "gemv":
        return 0
    width = tile_width(launch)
    pipeline = p[4] * (p[0] + width) * p[2] * 2
    return pipeline + (p[0] * width * 2 if name in STAGED_EPILOGUE else 0)


def waves(
    launch: Launch, m: int, n: int, k: int, sms: int = SMS, ridge: float = RIDGE_H100
) -> float:
    """Rounds of whole tiles a launch needs over ``sms`` SMs (one program per SM at a time), in
    tile times: what makes a launch fast at one M and slow at the next (a partial last wave).
    Split launches also pay for summing their partials (:func:`reduction_waves`)."""
    name, p = launch
    tiles = math.ceil(m / p[0]) * math.ceil(n / tile_width(launch))
    steps = math.ceil(k / p[2])
    if name in ("split_k", "split_k_fused", "tma_wide_split"):
        splits = p[6] if name == "tma_wide_split" else p[5]
        return math.ceil(tiles * splits / sms) / splits + reduction_waves(
            tiles, splits, k, sms, ridge
        )
    if name == "stream_k":  # every tile's K steps shared out evenly
        return math.ceil(tiles * steps / sms) / steps
    if name in ("persistent_stream_k", "persistent_stream_k_fused"):
        # whole waves, then the last wave's K steps shared out
        tail = tiles % sms
        if not tail:
            return tiles // sms
        per = max(math.ceil(tail * steps / sms), math.ceil(steps / 4))
        users = math.ceil(tail * steps / per)
        partials = min(tail + users, 2 * users)  # a program's first and last stretch at most
        return tiles // sms + per / steps + reduction_waves(partials, 1, k, sms, ridge)
    shared = name == "persistent_tail_shared"  # every piece in one round, on its own SM
    if name in ("tail_split", "persistent_tail") or shared:  # as their launchers split the tail
        tail, splits, best = tiles % sms, 1, 1.0
        for count in range(2, min(8, steps) + 1):
            cost = math.ceil(tail * count / sms) / count + 0.02 * (count - 1)
            if tail and cost < best and (not shared or tail * count <= sms):
                splits, best = count, cost
        if splits == 1:
            return math.ceil(tiles / sms)
        split = math.ceil(tail * splits / sms) / splits + reduction_waves(
            tail, splits, k, sms, ridge
        )
        return tiles // sms + split
    return math.ceil(tiles / sms)


def times(report: dict[str, Any]) -> dict[str, dict[int, dict[Launch, float]]]:
    """Per projection, per selection M, per launch that passed: its median time (us)."""
    out: dict[str, dict[int, dict[Launch, float]]] = defaultdict(dict)
    for key, results in report["shapes"].items():
        projection, m = key.split(" M=")
        timed = {_unlabel(k): v["t_us"] for k, v in results.items() if "t_us" in v}
        if timed:
            out[projection][int(m)] = timed
    return dict(out)


# Below this M the wave model interpolates times alone: a GEMM of M tokens does about M flops
# per byte of weights read, so small M is bound by memory, not by how full the last wave of
# tiles is. Leaving each selection M out (assess, two H100 sweeps averaged): 0.967 of the best
# launch with 128 here, 0.963 with the waves counted at every M, 0.958 from 1024 up.
WAVES_FROM_M = 128


# A launch chosen between two measured Ms must have been close to the fastest at one of them: the
# wave model extrapolates a launch's time per wave, and a launch slow at both Ms (a split whose
# sums cost more than the model charges, say) can be predicted fast in between. Leaving each
# selection M out (assess): 0.975 of the best launch with 0.2 against 0.967 with no filter on
# two H200 sweeps, 0.979 against 0.974 on three H100 sweeps; 0.1 gave 0.974 and 0.972, 0.3
# 0.974 and 0.979.
CONTENDER_SLACK = 0.2

# ...unless the model fits it: a launch whose time per wave at the two Ms agrees within this
# (log ratio) is a contender however slow it was at both, since what the model predicts between
# them rests on nothing but that time. Whole-tile launches that fill one wave at each M they
# straddle were kept out before (70B_tp8.qkv's 128 x 160 tiles: 96 tiles at M = 1536 and 192 at
# 3072, 69.6 and 68.6 us a wave, more than 0.2 slower than the best at both Ms, where at
# M = 2048 its 128 tiles are one wave and 128 x 128 tiles two). Leaving each selection M out
# (assess): 0.979 of the best launch on the eight H100 sweeps, 5 Ms below 0.9 (6 without this),
# and 0.975 on the two H200 sweeps, as without it.
WAVE_AGREEMENT = 0.05


def modelled_choice(
    per_m: dict[int, dict[Launch, float]], m: int, n: int, k: int, ridge: float = RIDGE_H100
) -> Launch | None:
    """The launch with the least predicted time at ``m``, from its times at the measured Ms on
    either side: time per wave (:func:`waves`) interpolated in log M, times the waves at ``m``
    (from :data:`WAVES_FROM_M` up; below it, the time itself). Past the largest measured M, the
    time per wave there carries on (a large GEMM's tiles take as long at any M; how full the
    last wave is decides). None when ``m`` has no measured M below it sharing a launch with the
    one above, or is past the last below :data:`WAVES_FROM_M`. Only contenders are predicted:
    launches within :data:`CONTENDER_SLACK` of the fastest at one of the two Ms at least (past
    the last M, every launch), and those whose time per wave agrees at both within
    :data:`WAVE_AGREEMENT` (from :data:`WAVES_FROM_M` up)."""
    below = [x for x in per_m if x < m]
    above = [x for x in per_m if x > m]
    if not below or (not above and m < WAVES_FROM_M):
        return None
    low = max(below)
    high = min(above) if above else low
    best = {x: min(per_m[x].values()) for x in (low, high)}

    def count(launch: Launch, x: int) -> float:
        return waves(launch, x, n, k, ridge=ridge) if m >= WAVES_FROM_M else 1.0

    def per_wave(launch: Launch) -> list[float]:
        return [per_m[x][launch] / count(launch, x) for x in (low, high)]

    def fitted(launch: Launch) -> bool:
        first, second = per_wave(launch)
        return m >= WAVES_FROM_M and abs(math.log(first / second)) <= WAVE_AGREEMENT

    common = {
        launch
        for launch in set(per_m[low]) & set(per_m[high])
        if high == low
        or any(per_m[x][launch] <= (1 + CONTENDER_SLACK) * best[x] for x in (low, high))
        or fitted(launch)
    }
    if not common:
        return None
    at = math.log(m / low) / math.log(high / low) if high > low else 0.0
    predicted = {}
    for launch in sorted(common):
        times_per_wave = per_wave(launch)
        log_wave = (1 - at) * math.log(times_per_wave[0]) + at * math.log(times_per_wave[1])
        predicted[launch] = math.exp(log_wave) * count(launch, m)
    return min(predicted, key=lambda launch: predicted[launch])


def assess(args: argparse.Namespace) -> None:
    """Leave one selection M out at a time: how close each way of choosing for an unmeasured M
    (the nearer neighbour's best, the best over both neighbours, the wave model) comes to the
    best launch measured there, from its two neighbours' measurements only."""
    dims = projection_dims()
    report = read_sweeps(args.sweep)
    ridge = ridge_of(report)
    scores: dict[str, list[float]] = defaultdict(list)
    for projection, per_m in sorted(times(report).items()):
        n, k = dims[projection]
        ms = sorted(per_m)
        # Past the last M: the largest measured M, chosen for from the one below it alone.
        if len(ms) > 1:
            low, last = ms[-2:]
            here, best = per_m[last], min(per_m[last].values())
            beyond = {
                "below's best, past the last M": min(per_m[low], key=lambda c: per_m[low][c]),
                "wave model, past the last M": modelled_choice(
                    {low: per_m[low]}, last, n, k, ridge
                ),
            }
            for way, launch in beyond.items():
                if launch is not None and launch in here:
                    scores[way].append(best / here[launch])
        for low, m, high in zip(ms, ms[1:], ms[2:], strict=False):
            here = per_m[m]
            best = min(here.values())
            near = {x: per_m[x] for x in (low, high)}
            if not set(near[low]) & set(near[high]) & set(here):
                continue
            nearer = low if math.log(m / low) <= math.log(high / m) else high
            choices = {
                "nearer neighbour's best": min(near[nearer], key=lambda c: near[nearer][c]),
                "best over both neighbours": _best(
                    [{c: 1 / t for c, t in near[x].items()} for x in (low, high)]
                )[0],
                "wave model": modelled_choice(near, m, n, k, ridge),
            }
            for way, launch in choices.items():
                if launch is not None and launch in here:
                    scores[way].append(best / here[launch])
    for way, values in scores.items():
        mean, worst = statistics.geometric_mean(values), sum(v < 0.9 for v in values)
        print(f"{way}: {mean:.3f} of the best launch over {len(values)} held-out Ms "
              f"({worst} below 0.9, worst {min(values):.2f})")  # fmt: skip


def variant_gains(
    report: dict[str, Any], variants: tuple[str, ...]
) -> tuple[dict[str, tuple[Launch, float, float]], float, float]:
    """What ``variants`` add to a sweep: per selection shape where one of their launches is the
    fastest, that launch, its ratio to cuBLAS and its margin over the fastest other launch; and
    the geomean over all shapes of the best ratio without them and with them."""
    wins: dict[str, tuple[Launch, float, float]] = {}
    without, with_them = [], []
    for key, results in report["shapes"].items():
        _, timed = shape_ratios(results)
        new = {label: r for label, r in timed.items() if label.split()[0] in variants}
        old = {label: r for label, r in timed.items() if label not in new}
        if not old:
            continue
        best_old = max(old.values())
        best = max([best_old, *new.values()])
        without.append(best_old)
        with_them.append(best)
        if best > best_old:
            label = max(new, key=lambda label: new[label])
            wins[key] = (_unlabel(label), best, best / best_old)
    if not without:
        return wins, math.nan, math.nan
    return wins, statistics.geometric_mean(without), statistics.geometric_mean(with_them)


def gains(args: argparse.Namespace) -> None:
    report = read_sweeps(args.sweep, tuple(args.fresh))
    wins, without, with_them = variant_gains(report, tuple(args.variants))
    for key, (launch, ratio, margin) in sorted(wins.items(), key=lambda kv: -kv[1][2]):
        print(f"{key}: {_label(launch)} {ratio:.3f} of cuBLAS, {margin:.3f}x the best other launch")
    print(
        f"{' '.join(args.variants)}: fastest on {len(wins)} of {len(report['shapes'])} shapes; "
        f"best launch per shape {without:.3f} of cuBLAS without them, {with_them:.3f} with them"
    )


def l2_bytes(launch: Launch, m: int, n: int, k: int) -> int:
    """Bytes a launch's tiles read from L2 into the SMs: every tile reads its rows of x and its
    columns of w over all of K (a split or stream-K tile as much, in pieces), bf16, padded to
    whole tiles: 2 * K * (N' * M' / width + M' * N' / height). A tile's harmonic size sets it:
    128 x 128 reads 1.33x what 128 x 256 does per flop; no two tiles share a load (Triton 3.6 has
    no clusters)."""
    height, width = launch[1][0], tile_width(launch)
    m_padded, n_padded = math.ceil(m / height) * height, math.ceil(n / width) * width
    return 2 * k * (n_padded * m_padded // width + m_padded * n_padded // height)


def l2_rates(report: dict[str, Any], min_m: int) -> list[tuple[str, Launch, float, float]]:
    """Per selection shape of M >= ``min_m``: its fastest launch, that launch's ratio to cuBLAS,
    and the rate its tiles read from L2 (TB/s, :func:`l2_bytes` over its time); worst first."""
    dims = projection_dims()
    rows = []
    for key, results in report["shapes"].items():
        projection, m_text = key.split(" M=")
        m = int(m_text)
        cublas, timed = shape_ratios(results)
        if m < min_m or not timed:
            continue
        label = max(timed, key=lambda label: timed[label])
        launch = _unlabel(label)
        n, k = dims[projection]
        us = cublas / timed[label]
        rows.append((key, launch, timed[label], l2_bytes(launch, m, n, k) / us / 1e6))
    return sorted(rows, key=lambda row: row[2])


def l2(args: argparse.Namespace) -> None:
    rows = l2_rates(read_sweeps(args.sweep, tuple(args.fresh)), args.min_m)
    for key, launch, ratio, rate in rows:
        print(f"{key:24} {_label(launch):44} {ratio:.3f} of cuBLAS, {rate:5.1f} TB/s from L2")
    slow = [rate for _, _, ratio, rate in rows if ratio < 0.9]
    if slow:
        print(f"{len(slow)} shapes below 0.9 of cuBLAS: their fastest launches read "
              f"{statistics.median(slow):.1f} TB/s from L2 (median; {min(slow):.1f}-"
              f"{max(slow):.1f})")  # fmt: skip


def selection_losses(
    report: dict[str, Any], heldout: dict[str, Any]
) -> list[tuple[str, str, float | None, str, float]]:
    """Per test shape of a held-out sweep: the launch chosen there from the selection sweeps
    (:func:`chosen_launch`) and its ratio to cuBLAS in the held-out sweep (None where that sweep
    did not time it), then the held-out sweep's best launch and its ratio."""
    dims = projection_dims()
    chooser = times(report)
    ridge = ridge_of(report)
    rows = []
    for key, results in heldout["shapes"].items():
        _, timed = shape_ratios(results)
        if not timed:
            continue
        projection, m = key.split(" M=")
        n, k = dims[projection]
        chosen = _label(chosen_launch(chooser[projection], int(m), n, k, ridge))
        best = max(sorted(timed), key=lambda label: timed[label])
        rows.append((key, chosen, timed.get(chosen), best, timed[best]))
    return rows


def selection(args: argparse.Namespace) -> None:
    report = read_sweeps(args.sweep, tuple(args.fresh))
    heldout = read_report(args.heldout)
    if not heldout.get(HELDOUT):
        raise SystemExit(f"{args.heldout} is not a held-out sweep (sweep --heldout writes one)")
    rows = selection_losses(report, heldout)
    for key, chosen, ratio, best, best_ratio in rows:
        got = "not swept" if ratio is None else f"{ratio:.3f} ({ratio / best_ratio:.3f} of best)"
        print(f"{key:24s} chosen {chosen:44s} {got}; best {best} {best_ratio:.3f}")
    both = [(ratio, best) for _, _, ratio, _, best in rows if ratio is not None]
    if both:
        chosen_mean = statistics.geometric_mean([r for r, _ in both])
        best_mean = statistics.geometric_mean([b for _, b in both])
        print(f"{len(both)} of {len(rows)} test shapes: chosen launches {chosen_mean:.3f} of "
              f"cuBLAS, the best launch per shape {best_mean:.3f}; the choice keeps "
              f"{chosen_mean / best_mean:.3f} of the best")  # fmt: skip


def compose(args: argparse.Namespace) -> None:
    report = read_sweeps(args.sweep, tuple(args.fresh))
    for projection, per_m in sorted(ratios(report).items()):
        cells = []
        for m, launches in sorted(per_m.items()):
            launch, ratio = _best([launches])
            cells.append(f"{m}:{_label(launch)}={ratio:.2f}")
        print(projection, " ".join(cells))
    source = initial_program()
    for condition, name, params in reversed(dispatch_rules(report)):
        hunks = add_rule(source, condition, VARIANTS[name], params)
        if hunks is None:
            raise SystemExit(f"cannot add {name} {params} under {condition}")
        source = apply_hunks(source, hunks)
    Path(args.program).write_text(source)
    print(f"wrote {args.program}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("sweep")
    one.add_argument("--out", default="sweep.json")
    one.add_argument("--samples", type=int, default=5)
    one.add_argument("--seed", type=int, default=3)
    one.add_argument("--jobs", type=int, default=14)
    one.add_argument("--only", default="", help="';'-separated parts of shape keys to keep")
    one.add_argument("--max-m", type=int, default=0, help="only shapes with M <= this (0: all)")
    one.add_argument(
        "--heldout", action="store_true", help="the test shapes instead, for `selection` alone"
    )
    two = sub.add_parser("compose")
    two.add_argument("--sweep", required=True, nargs="+", help="one sweep report or more")
    two.add_argument("--program", default="tuned.txt")
    two.add_argument(
        "--fresh",
        nargs="*",
        default=[],
        metavar="VARIANT",
        help="variants changed since the earlier sweeps: timed by the last alone",
    )
    three = sub.add_parser("assess")
    three.add_argument("--sweep", required=True, nargs="+", help="one sweep report or more")
    four = sub.add_parser("gains")
    four.add_argument("--sweep", required=True, nargs="+", help="one sweep report or more")
    four.add_argument("--variants", required=True, nargs="+", metavar="VARIANT")
    four.add_argument("--fresh", nargs="*", default=[], metavar="VARIANT")
    five = sub.add_parser("l2")
    five.add_argument("--sweep", required=True, nargs="+", help="one sweep report or more")
    five.add_argument("--min-m", type=int, default=192, help="only shapes with M >= this")
    five.add_argument("--fresh", nargs="*", default=[], metavar="VARIANT")
    six = sub.add_parser("selection")
    six.add_argument("--sweep", required=True, nargs="+", help="the selection sweeps")
    six.add_argument("--heldout", required=True, help="a sweep --heldout report")
    six.add_argument("--fresh", nargs="*", default=[], metavar="VARIANT")
    args = parser.parse_args()
    commands = {
        "sweep": sweep,
        "compose": compose,
        "assess": assess,
        "gains": gains,
        "l2": l2,
        "selection": selection,
    }
    commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
