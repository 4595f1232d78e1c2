"""Probes of single kernels on the GPU, to explain what the sweep measured (not a harness).

    python bench/gpu_kernel_probe.py [--out probe.json] [--samples 25]

Two questions, each a table of median times (CUDA events around one launch, after an L2 flush
as the harness does it, or as named):

- **split**: does splitting a mid-size tile along K shorten the programs as it should? The
  first H200 sweeps timed a 128x256 tail split of 8B.qkv M=256 (48 tiles, two K halves on 96
  SMs) at 49 us, the same as one program per whole tile (50 us). Here ``tail_split_kernel``
  runs alone (every tile in the tail, ``splits`` forced) for splits 1-4 and four tiles, beside
  its sum kernel, the whole launch, cuBLAS, and plain reads of w and x (torch.sum: the floor a
  kernel that reads w once from HBM cannot go under), after a dirty and after a clean flush.
- **l2**: is a launch after the flush slowed by the flush's dirty lines? The same launch after
  a write flush (the harness's), after a write flush then a read of another buffer of the same
  size (clean lines), and warm (no flush), for cuBLAS and our kernels, decode and mid-size.

- **wide**: why are ``tma_wide``'s 128-row tiles slow? The first sweep with it timed 128x160
  tiles (8 warps, 4 stages) of 70B_tp8.qkv M=1536 at 0.51 of cuBLAS, where 96 such tiles (one
  wave) should have come near the 0.87 of 128x128 tail splits; ``tma``'s own 128x128 tiles with
  8 warps came to 0.69 there, against 0.86 for ``tma_persistent``'s with one tile a program.
  Here those tiles with and without the extra part, one program per tile and persistent, over
  warps, stages and widths, on that shape and on 8B.qkv M=768 and M=3072 (K = 4096), with each
  compiled kernel's registers, spills and shared memory, and TFLOP/s.
- **streamk**: where does ``persistent_stream_k``'s time go? On 70B_tp8.qkv (K = 8192) at
  M = 768 (60 tiles of 128x128 on 132 SMs: 58 K steps a program instead of a tile's 128) the
  sweeps timed it at 47 us, where ``tma_persistent``'s whole tiles took 55 us for 128 steps
  (M = 1536): 0.43 us a step, so about 25 us of steps and 22 us of something else. Here its
  first kernel alone, its sum kernel alone and the whole launch, beside the same with the
  partial tiles' workspace offsets computed at the store (not live through the K loop), and
  with the partial tiles stored through a TMA descriptor instead of pointer stores, against
  ``tma_persistent``'s whole tiles and cuBLAS.
- **pieces**: is stream-K's first kernel slow per K step because its programs start and end
  inside tiles, or because every SM is busy at once? Its first kernel (unchanged) runs with the
  K steps a program forced to a whole tile, a half and a quarter (pieces aligned to tiles, as
  many programs as pieces, at most one per SM) and with the launcher's own share (pieces that
  start inside tiles, one program per SM), beside ``tma_persistent``'s whole tiles, on
  70B_tp8.qkv M=768 and M=1536 in 128x128 (4 warps) and 128x256 (8 warps) tiles.
- **cublas**: which kernels does cuBLAS run for each selection shape (gemm-tiling's train and
  validation shapes)? Their names (torch.profiler) carry the tile, the cluster shape and any
  split or stream-K scheme.

Our own kernel variants are imported from their text (variants/<name>.txt), trusted here.
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import statistics
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from codevolve.evaluator_workers.gpu.source_loader import LoadError, SourceModules
from codevolve.problems.gemm_kernel_gpu.kernel_source import VARIANTS, variant_source
from codevolve.problems.gemm_tiling.shapes import train_shapes, validation_shapes

PRELUDE = "import math\nimport torch\nimport triton\nimport triton.language as tl\n"
SHAPES = {  # key: (M, N, K)
    "8B.qkv M=1": (1, 6144, 4096),
    "8B.qkv M=256": (256, 6144, 4096),
    "8B.qkv M=512": (512, 6144, 4096),
    "70B_tp8.qkv M=1024": (1024, 1280, 8192),
    "70B_tp8.qkv M=1536": (1536, 1280, 8192),
    "8B.qkv M=768": (768, 6144, 4096),
    "70B_tp8.qkv M=768": (768, 1280, 8192),
    "8B.qkv M=3072": (3072, 6144, 4096),
}


def load_variant(name: str, modules: SourceModules) -> SimpleNamespace:
    """Variant ``name``'s namespace, run from a file (Triton reads kernel source through inspect)
    with the full builtins: our own code, trusted here."""
    return load_source(name, variant_source(name), modules)


def load_source(name: str, source: str, modules: SourceModules) -> SimpleNamespace:
    namespace = modules.run(PRELUDE + source, f"probe_{name}", builtins)
    if isinstance(namespace, LoadError):
        raise SystemExit(f"variant {name}: {namespace.message}")
    return SimpleNamespace(**namespace)


class Clock:
    """Median time of a launch under one L2 state: "dirty" (write flush), "clean" (write flush,
    then a read of as many other bytes), "warm" (no flush)."""

    def __init__(self, samples: int) -> None:
        import torch

        from codevolve.problems.gemm_tiling_gpu.device.gemm_bench import FLUSH_MIN_BYTES

        self.torch = torch
        self.samples = samples
        self.flush = torch.empty(FLUSH_MIN_BYTES // 4, dtype=torch.int32, device="cuda")
        self.other = torch.ones(FLUSH_MIN_BYTES // 4, dtype=torch.int32, device="cuda")
        self.sink = torch.empty((), dtype=torch.int64, device="cuda")

    def time_us(self, launch: Callable[[], Any], state: str = "dirty") -> float:
        torch = self.torch
        for _ in range(3):
            launch()
        times = []
        for _ in range(self.samples):
            if state != "warm":
                self.flush.zero_()
            if state == "clean":
                self.sink = torch.sum(self.other, dtype=torch.int64)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(100_000)  # the host's lead: the launch is queued before it runs
            start.record()
            launch()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0)
        return statistics.median(times)


def operands(dims: tuple[int, int, int]) -> tuple[Any, Any, Any, Any]:
    import torch

    from codevolve.problems.gemm_kernel_gpu.device.kernel_bench import workspace_elements

    m, n, k = dims
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    workspace = torch.empty(workspace_elements(m, n), device="cuda", dtype=torch.float32)
    return x, w, y, workspace


SECTIONS = ("split", "l2", "wide", "streamk", "pieces", "cublas")
STATES = ("dirty", "clean")
# Tiles of the split probe (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages): the sweep's mid-size
# 128-row tiles, and the same with 128-wide K steps (256 contiguous bytes of each row a step).
TILES = ((128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 128, 8, 2), (128, 128, 128, 8, 3))


def probe_split(clock: Clock, tail: Any, num_sms: int) -> list[dict[str, Any]]:
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    rows: list[dict[str, Any]] = []
    for key in ("8B.qkv M=256", "70B_tp8.qkv M=1024"):
        m, n, k = dims = SHAPES[key]
        x, w, y, workspace = operands(dims)
        for state in STATES:
            rows.append({"shape": key, "what": "cublas", "l2": state,
                         "us": clock.time_us(partial(cublas, x, w), state)})  # fmt: skip
        for name, read in (
            ("w.sum", partial(torch.sum, w, dtype=torch.float32)),
            ("x.sum", partial(torch.sum, x, dtype=torch.float32)),
        ):
            for state in STATES:
                rows.append({"shape": key, "what": name, "l2": state,
                             "us": clock.time_us(read, state)})  # fmt: skip
        for bm, bn, bk, warps, stages in TILES:
            tiles = -(-m // bm) * -(-n // bn)
            descs = (TensorDescriptor.from_tensor(x, [bm, bk]),
                     TensorDescriptor.from_tensor(w, [bn, bk]),
                     TensorDescriptor.from_tensor(y, [bm, bn]))  # fmt: skip
            tile = f"{bm}x{bn}x{bk} w{warps} s{stages}"
            for splits in (1, 2, 3, 4):
                if tiles * splits * bm * bn > workspace.numel():
                    continue
                main_kernel = partial(
                    tail.tail_split_kernel[(tiles * splits,)], *descs, workspace, m, n, k, 0,
                    splits, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps,
                    num_stages=stages,
                )  # fmt: skip
                rows_per = min(bm, 16)
                reduce_kernel = partial(
                    tail.tail_reduce_kernel[(tiles, bm // rows_per)], workspace, y, m, n, 0,
                    splits, y.stride(0), y.stride(1), BLOCK_M=bm, BLOCK_N=bn, GROUP_M=8,
                    ROWS=rows_per, num_warps=4,
                )  # fmt: skip
                label = f"main {tile} splits={splits} programs={tiles * splits}"
                for state in STATES:
                    rows.append({"shape": key, "what": label, "l2": state,
                                 "us": clock.time_us(main_kernel, state)})  # fmt: skip
                if splits == 2:
                    rows.append({"shape": key, "what": f"reduce {tile} splits=2", "l2": "clean",
                                 "us": clock.time_us(reduce_kernel, "clean")})  # fmt: skip
            whole = partial(tail.launch_tail_split, x, w, y, workspace, num_sms, bm, bn, bk, warps,
                            stages, 8)  # fmt: skip
            for state in STATES:
                rows.append({"shape": key, "what": f"launch_tail_split {tile}", "l2": state,
                             "us": clock.time_us(whole, state)})  # fmt: skip
    return rows


def cublas(x: Any, w: Any) -> Any:
    return x @ w.T


def probe_l2(clock: Clock, modules: dict[str, Any], num_sms: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for key in ("8B.qkv M=1", "8B.qkv M=256", "8B.qkv M=512"):
        x, w, y, workspace = operands(SHAPES[key])
        args = (x, w, y, workspace, num_sms)
        launches: dict[str, Callable[[], Any]] = {"cublas": partial(cublas, x, w)}
        if key.endswith("M=1"):
            launches["split_k 16x64x128 w4 s4 k8"] = partial(
                modules["split_k"].launch_split_k, *args, 16, 64, 128, 4, 4, 8
            )
        else:
            launches["tma_persistent 128x256x64 w8 s3"] = partial(
                modules["tma_persistent"].launch_tma_persistent, *args, 128, 256, 64, 8, 3, 8, 1
            )
        for what, launch in launches.items():
            for state in ("dirty", "clean", "warm"):
                rows.append(
                    {"shape": key, "what": what, "l2": state, "us": clock.time_us(launch, state)}
                )
    return rows


# The wide probe's launches (variant, parameters): 128-row tiles 128 + extra_n wide against the
# same tiles without the extra part, one program per tile and persistent, 8 and 4 warps.
WIDE_LAUNCHES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("tma", (128, 128, 64, 8, 4, 8)),
    ("tma", (128, 128, 64, 4, 4, 8)),
    ("tma", (128, 256, 64, 8, 3, 8)),
    ("tma_persistent", (128, 128, 64, 8, 4, 8, 0)),
    ("tma_persistent", (128, 128, 64, 8, 4, 8, 1)),
    ("tma_wide", (128, 128, 64, 8, 4, 8, 32)),
    ("tma_wide", (128, 128, 64, 8, 3, 8, 32)),
    ("tma_wide", (128, 128, 64, 4, 4, 8, 32)),
    ("tma_wide", (128, 128, 64, 8, 4, 8, 64)),
    ("tma_wide", (128, 64, 64, 4, 4, 8, 32)),
    ("tma_wide", (128, 64, 64, 8, 4, 8, 32)),
    ("tma_persistent_wide", (128, 128, 64, 8, 4, 8, 0, 64)),
    ("tma_persistent_wide", (128, 128, 64, 8, 4, 8, 1, 64)),
    ("tma_persistent_wide", (128, 128, 64, 4, 4, 8, 0, 32)),
    # 256-row tiles, 8 warps (128 rows a warpgroup): plain, persistent, wide, and wide split
    # along K (the first sweep with tma_wide_split timed it at 0.38-0.68 of cuBLAS).
    ("tma", (256, 128, 64, 8, 3, 8)),
    ("tma_persistent", (256, 128, 64, 8, 3, 8, 0)),
    ("tma_wide", (256, 128, 64, 8, 3, 8, 32)),
    ("tma_persistent_wide", (256, 128, 64, 8, 2, 8, 0, 32)),
    ("tma_wide_split", (256, 128, 64, 8, 3, 8, 2, 32)),
    ("tma_wide_split", (128, 128, 64, 4, 4, 8, 2, 32)),
    ("tma_wide_split", (128, 128, 64, 4, 4, 8, 1, 32)),
)
WIDE_PROBED = ("tma", "tma_persistent", "tma_wide", "tma_persistent_wide", "tma_wide_split")


def tile_width(name: str, params: tuple[int, ...]) -> int:
    """A launch's tile extent along N: block_n, plus extra_n for the two-dot wide variants."""
    names = VARIANTS[name].params
    return params[1] + (params[names.index("extra_n")] if "extra_n" in names else 0)


def compiled_facts(kernel: Any) -> list[dict[str, Any]]:
    """Registers, spills and shared memory of each compiled version of a Triton kernel (empty
    where this Triton keeps its cache elsewhere)."""
    facts = []
    try:
        for cache in kernel.device_caches.values():
            for compiled in cache[0].values():
                facts.append({
                    "regs": compiled.n_regs, "spills": compiled.n_spills,
                    "shared": compiled.metadata.shared, "warps": compiled.metadata.num_warps,
                    "stages": compiled.metadata.num_stages,
                    "constants": str(getattr(compiled.src, "constants", ""))[:300],
                })  # fmt: skip
    except (AttributeError, TypeError, IndexError, KeyError):
        return facts
    return facts


def probe_wide(clock: Clock, modules: dict[str, Any], num_sms: int) -> list[dict[str, Any]]:
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    refused = (CompilationError, OutOfResources, RuntimeError)
    rows: list[dict[str, Any]] = []
    for key in ("70B_tp8.qkv M=1536", "8B.qkv M=768", "8B.qkv M=3072"):
        m, n, k = SHAPES[key]
        x, w, y, workspace = operands((m, n, k))
        args = (x, w, y, workspace, num_sms)
        rows.append({"shape": key, "what": "cublas", "us": clock.time_us(partial(cublas, x, w))})
        for name, params in WIDE_LAUNCHES:
            launch = partial(getattr(modules[name], f"launch_{name}"), *args, *params)
            try:
                us = clock.time_us(launch)
            except refused as error:  # a launch this GPU refuses is a finding, not a stop
                rows.append({"shape": key, "what": f"{name} {params}", "error": str(error)[:300]})
                continue
            tiles = -(-m // params[0]) * -(-n // tile_width(name, params))
            rows.append({
                "shape": key, "what": f"{name} {params}", "us": us, "tiles": tiles,
                "tflops": 2 * m * n * k / us / 1e6,
            })  # fmt: skip
            print(f"wide {key}: {name} {params} {us:.1f} us, {tiles} tiles", flush=True)
    for name in WIDE_PROBED:
        facts = compiled_facts(getattr(modules[name], f"{name}_kernel"))
        rows.append({"shape": "", "what": f"{name} compiled", "us": 0.0, "compiled": facts})
    return rows


# persistent_stream_k with its partial tiles stored through a TMA descriptor over the workspace
# (rows of BLOCK_N fp32) instead of pointer stores in the accumulator's layout.
STREAMK_TMA_EDITS = (
    ("    x_desc, w_desc, y_desc, ws_ptr, M, N, K, full_tiles, per_program, programs,\n",
     "    x_desc, w_desc, y_desc, ws_ptr, ws_desc, M, N, K, full_tiles, per_program, programs,\n"),
    ("            tl.store(ws_ptr + slot * block + inner, acc)\n",
     "            ws_desc.store([slot * BLOCK_M, 0], acc)\n"),
    ("        x_desc, w_desc, y_desc, workspace, M, N, K, full, per_program, programs,\n",
     "        x_desc, w_desc, y_desc, workspace,\n"
     "        TensorDescriptor.from_tensor(workspace.view(-1, block_n), [block_m, block_n]),\n"
     "        M, N, K, full, per_program, programs,\n"),
)  # fmt: skip


# persistent_stream_k with the workspace offsets of a partial tile (a BLOCK_M x BLOCK_N int32
# tensor) computed at the store instead of before the loops, where they may stay live beside
# the accumulator through every K step.
_INNER = "inner = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]\n"
STREAMK_LATE_OFFSETS_EDITS = (
    ("    " + _INNER, ""),
    ("            tl.store(ws_ptr + slot * block + inner, acc)\n",
     "            " + _INNER + "            tl.store(ws_ptr + slot * block + inner, acc)\n"),
)  # fmt: skip


def edited_stream_k(edits: tuple[tuple[str, str], ...]) -> str:
    source = variant_source("persistent_stream_k")
    for old, new in edits:
        if source.count(old) != 1:
            raise SystemExit(f"persistent_stream_k changed: no single {old.strip()!r} to edit")
        source = source.replace(old, new)
    return source


class _Recorder:
    """Stands in for a Triton kernel: ``kernel[grid](...)`` records the launch instead."""

    def __init__(self, name: str, kernel: Any, launches: dict[str, Callable[[], Any]]) -> None:
        self._name, self._kernel, self._launches = name, kernel, launches

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        def record(*args: Any, **kwargs: Any) -> None:
            self._launches[self._name] = partial(self._kernel[grid], *args, **kwargs)

        return record


def kernel_launches(launcher: Callable[..., Any], *args: Any) -> dict[str, Callable[[], Any]]:
    """Each kernel launch ``launcher(*args)`` makes, by kernel name, as a call that repeats it:
    the launcher runs once with its module's Triton kernels swapped for recorders (nothing
    runs on the device), so the grids and arguments are the launcher's own."""
    from triton.runtime.jit import JITFunction

    namespace = launcher.__globals__
    kernels = {name: v for name, v in namespace.items() if isinstance(v, JITFunction)}
    launches: dict[str, Callable[[], Any]] = {}
    try:
        namespace.update({name: _Recorder(name, k, launches) for name, k in kernels.items()})
        launcher(*args)
    finally:
        namespace.update(kernels)
    return launches


def probe_streamk(clock: Clock, modules: dict[str, Any], num_sms: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    kinds = {"pointer stores": modules["persistent_stream_k"],
             "pointer stores, offsets at the store": modules["persistent_stream_k_late"],
             "TMA stores": modules["persistent_stream_k_tma"]}  # fmt: skip
    for key in ("70B_tp8.qkv M=768", "70B_tp8.qkv M=1536"):
        m, n, k = SHAPES[key]
        x, w, y, workspace = operands((m, n, k))
        args = (x, w, y, workspace, num_sms)

        def note(
            what: str,
            launch: Callable[[], Any],
            key: str = key,
            states: tuple[str, ...] = ("dirty",),
        ) -> None:
            for state in states:
                us = clock.time_us(launch, state)
                rows.append({"shape": key, "what": what, "l2": state, "us": us})
                print(f"streamk {key}: {what} ({state} L2) {us:.1f} us", flush=True)

        note("cublas", partial(cublas, x, w), states=("dirty", "warm"))
        for params in ((128, 128, 64, 4, 4, 8, 1), (128, 128, 64, 8, 4, 8, 1)):
            tile = f"{params[0]}x{params[1]}x{params[2]} w{params[3]}"
            launch = modules["tma_persistent"].launch_tma_persistent
            note(
                f"tma_persistent {tile}", partial(launch, *args, *params), states=("dirty", "warm")
            )
            for kind, module in kinds.items():
                whole = partial(module.launch_persistent_stream_k, *args, *params)
                note(f"stream-K {kind} {tile} whole", whole)
                parts = kernel_launches(module.launch_persistent_stream_k, *args, *params)
                note(f"stream-K {kind} {tile} first kernel", parts["persistent_stream_k_kernel"],
                     states=("dirty", "warm"))  # fmt: skip
                if kind == "pointer stores":  # the sum kernel is the same in all three
                    note(f"stream-K {tile} sum kernel", parts["persistent_stream_k_fixup_kernel"])
    for kind, module in kinds.items():
        facts = compiled_facts(module.persistent_stream_k_kernel)
        what = f"stream-K {kind} compiled"
        rows.append({"shape": "", "what": what, "us": 0.0, "compiled": facts})
    return rows


def probe_pieces(clock: Clock, modules: dict[str, Any], num_sms: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    module = modules["persistent_stream_k"]
    for key in ("70B_tp8.qkv M=768", "70B_tp8.qkv M=1536"):
        m, n, k = SHAPES[key]
        x, w, y, workspace = operands((m, n, k))
        args = (x, w, y, workspace, num_sms)
        for params in ((128, 128, 64, 4, 4, 8, 1), (128, 256, 64, 8, 3, 8, 1)):
            tile = f"{params[0]}x{params[1]}x{params[2]} w{params[3]}"
            tiles = -(-m // params[0]) * -(-n // params[1])
            steps = -(-k // params[2])
            whole = partial(modules["tma_persistent"].launch_tma_persistent, *args, *params)
            shares = [(f"tma_persistent {tile}", whole, steps, min(tiles, num_sms))]
            first = kernel_launches(module.launch_persistent_stream_k, *args, *params)[
                "persistent_stream_k_kernel"
            ]
            full, own, programs = first.args[7:10]
            if full:  # only a launch with no whole waves is all stream-K pieces
                continue
            kernel = module.persistent_stream_k_kernel
            for share in sorted({steps, steps // 2, steps // 4, own}, reverse=True):
                grid = -(-tiles * steps // share)
                if grid > programs:  # one program an SM, and a workspace slot pair each
                    continue
                pieces = (*first.args[:8], share, *first.args[9:])
                what = f"stream-K first kernel {tile}, {share} steps a program"
                launch = partial(kernel[(grid,)], *pieces, **first.keywords)
                shares.append((what, launch, share, grid))
            for what, launch, share, grid in shares:
                us = clock.time_us(launch)
                rows.append({"shape": key, "what": what, "us": us, "programs": grid,
                             "us_per_step": us / share,
                             "tflops_per_sm": 2 * m * n * k / us / 1e6 / grid})  # fmt: skip
                print(f"pieces {key}: {what}: {us:.1f} us, {grid} programs, "
                      f"{us / share:.3f} us a step", flush=True)  # fmt: skip
    return rows


def probe_cublas() -> list[dict[str, Any]]:
    """The CUDA kernels torch.matmul runs for each selection shape, in launch order."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    rows: list[dict[str, Any]] = []
    selection = sorted(train_shapes() + validation_shapes(), key=lambda s: (s.projection, s.m))
    for shape in selection:
        x, w, _, _ = operands((shape.m, shape.n, shape.k))
        cublas(x, w)  # the first call picks and loads the kernels: not what is timed
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            cublas(x, w)
            torch.cuda.synchronize()
        kernels = [e.name for e in prof.events() if str(e.device_type).endswith("CUDA")]
        rows.append({"shape": f"{shape.projection} M={shape.m}", "kernels": kernels})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="probe.json")
    parser.add_argument("--samples", type=int, default=25)
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    args = parser.parse_args()
    import torch

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    clock = Clock(args.samples)
    with tempfile.TemporaryDirectory() as tmp:
        sources = SourceModules(Path(tmp), environ=dict(os.environ), suffix="")
        names = ("tail_split", "split_k", "persistent_stream_k", *WIDE_PROBED)
        modules = {name: load_variant(name, sources) for name in names}
        modules["persistent_stream_k_tma"] = load_source(
            "persistent_stream_k_tma", edited_stream_k(STREAMK_TMA_EDITS), sources
        )
        modules["persistent_stream_k_late"] = load_source(
            "persistent_stream_k_late", edited_stream_k(STREAMK_LATE_OFFSETS_EDITS), sources
        )
        probes = {
            "split": lambda: probe_split(clock, modules["tail_split"], num_sms),
            "l2": lambda: probe_l2(clock, modules, num_sms),
            "wide": lambda: probe_wide(clock, modules, num_sms),
            "streamk": lambda: probe_streamk(clock, modules, num_sms),
            "pieces": lambda: probe_pieces(clock, modules, num_sms),
            "cublas": probe_cublas,
        }
        report: dict[str, Any] = {"device": torch.cuda.get_device_name(0)}
        for section in args.sections:
            report[section] = probes[section]()
    Path(args.out).write_text(json.dumps(report, indent=1))
    for section in args.sections:
        for row in report[section]:
            if section == "cublas":
                print(f"{section:6} {row['shape']:20} {' | '.join(row['kernels'])}")
                continue
            if "error" in row or "compiled" in row:
                print(f"{section:6} {row['shape']:20} {row['what']:52} "
                      f"{row.get('error') or row.get('compiled')}")  # fmt: skip
                continue
            extra = f"{row['tiles']} tiles {row['tflops']:.0f} TFLOP/s" if "tiles" in row else ""
            if "programs" in row:
                extra = f"{row['programs']} programs {row['tflops_per_sm']:.2f} TFLOP/s an SM"
            print(f"{section:6} {row['shape']:20} {row['what']:52} {row.get('l2', ''):6} "
                  f"{row['us']:8.1f} {extra}")  # fmt: skip


if __name__ == "__main__":
    main()
