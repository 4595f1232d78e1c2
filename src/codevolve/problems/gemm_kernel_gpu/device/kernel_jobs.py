"""The device job of gemm-kernel-gpu: judge a candidate's kernel module against cuBLAS.

``kernel.measure``: ``{"source": str, "shapes": [[M, N, K], ...], "check_shapes": [[M, N, K],
...], "seed": int, "samples": int, "time": bool}`` -> ``{"device": info, "load_error": str,
"load_s": float, "problems": [str per checked shape], "timings": [Timing as a dict per shape,
with "batch" (calls per timed batch), "graph" (whether a CUDA graph ran them) and "eager_why"],
"isolation": {layer: held}, "seconds": {...}, "compiled_ahead": kernels (cubins) the runner
started with, "compiled_late": kernels it compiled itself, "compile": {"ahead", "complete",
"seconds", "note"}, "lane": {"pass", "judgings"}}``. Every
shape of ``check_shapes`` (ragged ones, say), then of ``shapes``, is checked first (fresh inputs,
three distributions); the first wrong shape ends the job (its problem is the last entry of
``problems``, nothing is timed). ``shapes`` may be empty when ``check_shapes`` is not (the
shapes a launch store already answers are not sent: docs/launch-store.md). Then, when ``time``
is set, every shape of ``shapes`` is timed against cuBLAS in the order given; a shape that
fails there is the first row whose status is not ``ok`` (the rows after it are ``skipped``).
``samples`` is the number of timed batches per shape.

The job is concurrent (device_process.py): many run at once, each through the device's
pipeline (kernel_pipeline.py: its kernels compiled in the compile lane, then checked and timed in
the timing lane with others). The candidate runs only in caged runners (judging.py,
kernel_compile.py); this process never executes its source.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from codevolve.evaluator_workers.errors import WorkerError
from codevolve.evaluator_workers.gpu import judging
from codevolve.problems.gemm_kernel_gpu.device.kernel_judge import MeasureSettings
from codevolve.problems.gemm_kernel_gpu.device.kernel_pipeline import Pipeline, PipelineSettings
from codevolve.problems.gemm_tiling.gpu_timing import Shape

MEASURE_JOB = "kernel.measure"
MAX_SAMPLES = 1000


class KernelJobError(WorkerError):
    """A malformed payload (an error reply; the device process lives on)."""


JobError = KernelJobError  # the name the device process looks for in a jobs module
CONCURRENT_JOBS = frozenset({"measure_job"})  # jobs that share the device (device_process.py)


_started: list[Pipeline] = []  # the device process's pipeline, once a job asked for it
_starting = threading.Lock()


def shutdown() -> None:
    """End the pipeline and the runners, if started (the device process calls this before it
    ends)."""
    with _starting:
        started = list(_started)
        _started.clear()
    for pipeline in started:
        pipeline.close()
    judging.shutdown()


def _pipeline() -> Pipeline:
    with _starting:
        if not _started:
            device = judging.device()
            settings = PipelineSettings.from_environment(os.environ, device)
            _started.append(Pipeline(settings, device=device, runners=judging.runners()))
        return _started[0]


def _shapes(rows: Any, key: str = "shapes") -> list[Shape]:
    if not isinstance(rows, list):
        raise KernelJobError(f"kernel.measure needs a list {key!r} of [M, N, K]")
    shapes = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and all(type(v) is int for v in row)):
            raise KernelJobError(f"a shape is [M, N, K] (three ints), not {row!r}")
        if min(row) < 1:
            raise KernelJobError(f"a shape's sizes are positive, not {row!r}")
        shapes.append((row[0], row[1], row[2]))
    return shapes


def settings_from(payload: Any) -> tuple[str, MeasureSettings]:
    """The source and the settings of a ``kernel.measure`` payload, or KernelJobError."""
    if not isinstance(payload, dict) or not isinstance(payload.get("source"), str):
        raise KernelJobError("kernel.measure needs a dict with a string 'source'")
    samples = payload.get("samples", 15)
    if type(samples) is not int or not 1 <= samples <= MAX_SAMPLES:
        raise KernelJobError(f"'samples' is an int from 1 to {MAX_SAMPLES}, not {samples!r}")
    seed = payload.get("seed", 0)
    if type(seed) is not int:
        raise KernelJobError(f"'seed' is an int, not {seed!r}")
    shapes = tuple(_shapes(payload.get("shapes")))
    check_shapes = tuple(_shapes(payload.get("check_shapes", []), "check_shapes"))
    if not shapes and not check_shapes:
        raise KernelJobError("kernel.measure needs a shape in 'shapes' or 'check_shapes'")
    settings = MeasureSettings(
        shapes=shapes,
        check_shapes=check_shapes,
        seed=seed,
        samples=max(3, samples),
        time=bool(payload.get("time", True)),
    )
    return payload["source"], settings


def measure_job(payload: Any, alive: Callable[[], None]) -> dict[str, Any]:
    """``kernel.measure`` through the device's pipeline (concurrent: it takes the device
    itself, for what needs it)."""
    source, settings = settings_from(payload)
    return _pipeline().measure(source, settings, alive)
