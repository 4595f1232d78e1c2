"""The device job of gemm-kernel-gpu: load a candidate's kernel module, check it, time it.

``kernel.measure``: ``{"source": str, "shapes": [[M, N, K], ...], "check_shapes": [[M, N, K],
...], "seed": int, "samples": int, "time": bool}`` -> ``{"device": info, "load_error": str,
"load_s": float, "problems": [str per checked shape], "timings": [Timing as a dict per shape]}``.
Every shape of ``check_shapes`` (ragged ones, say), then of ``shapes``, is checked first (fresh
inputs, three distributions); the first wrong shape ends the job (its problem is the last entry
of ``problems``, nothing is timed). Then, when ``time`` is set, every shape of ``shapes`` is
timed against cuBLAS in the order given. Loading and compiling happen once per distinct source
in this process (kernel_loader.py); a source's kernels are first compiled in parallel helper
processes (kernel_compile.py), ``compiled_ahead`` counting the shapes sent to them.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch

from codevolve.evaluator_workers.errors import WorkerError
from codevolve.evaluator_workers.gpu.gemm_bench import Shape, device_info, timing_dict
from codevolve.evaluator_workers.gpu.kernel_bench import KernelBench
from codevolve.evaluator_workers.gpu.kernel_compile import KernelCompiler, compile_workers
from codevolve.evaluator_workers.gpu.kernel_loader import KernelLoader, LoadError, source_digest

MEASURE_JOB = "kernel.measure"


class KernelJobError(WorkerError):
    """A malformed payload (raised as the device jobs' JobError by gemm_jobs)."""


@functools.cache
def _loader() -> KernelLoader:
    return KernelLoader()


@functools.cache
def _compiler() -> KernelCompiler:
    return KernelCompiler(compile_workers())


def shutdown() -> None:
    """Stop the compile helpers, if started (the device process calls this before it ends)."""
    if _compiler.cache_info().currsize:
        _compiler().close()


@functools.cache
def _bench() -> KernelBench:
    return KernelBench()


def _shapes(rows: Any, key: str = "shapes") -> list[Shape]:
    if not isinstance(rows, list) or (key == "shapes" and not rows):
        raise KernelJobError(f"kernel.measure needs a list {key!r} of [M, N, K]")
    shapes = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and all(type(v) is int for v in row)):
            raise KernelJobError(f"a shape is [M, N, K] (three ints), not {row!r}")
        if min(row) < 1:
            raise KernelJobError(f"a shape's sizes are positive, not {row!r}")
        shapes.append((row[0], row[1], row[2]))
    return shapes


def measure(payload: Any) -> Any:
    if not isinstance(payload, dict) or not isinstance(payload.get("source"), str):
        raise KernelJobError("kernel.measure needs a dict with a string 'source'")
    shapes = _shapes(payload.get("shapes"))
    checked = _shapes(payload.get("check_shapes", []), "check_shapes") + shapes
    seed = int(payload.get("seed", 0))
    samples = max(3, int(payload.get("samples", 15)))
    reply: dict[str, Any] = {"device": device_info(), "load_error": "", "problems": []}
    reply["timings"] = []
    started = time.perf_counter()
    launch = _loader().load(payload["source"])
    if isinstance(launch, LoadError):
        reply["load_error"] = launch.message
        return reply
    # After the load: the loader has scrubbed the environment the helpers inherit.
    compiled = _compiler().compile_ahead(
        payload["source"], source_digest(payload["source"]), checked
    )
    reply["compiled_ahead"] = compiled
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    bench = _bench()
    for shape in checked:
        problem = bench.check(launch, shape, gen)
        reply["problems"].append(problem)
        if problem:
            return reply
    reply["load_s"] = time.perf_counter() - started  # load, compile and check
    if payload.get("time", True):
        reply["timings"] = [
            timing_dict(bench.time(launch, shape, gen, samples=samples)) for shape in shapes
        ]
    return reply
