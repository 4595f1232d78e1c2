"""``codevolve worker --capability gpu [--gpus all|IDS]``: one worker process per GPU.

With several GPUs the command starts one copy of itself per GPU, each with ``CUDA_VISIBLE_DEVICES``
naming that GPU alone and ``--gpus`` set to its id, and passes signals on; with one GPU it is the
worker: it holds a device process pinned to that GPU and serves "gpu" tasks (the GPU part of
cascades that CPU workers handed on).
"""

from __future__ import annotations

import sys

from codevolve.core.errors import ConfigError
from codevolve.evaluator_workers.gpu.pinning import (
    open_devices,
    pinned_commands,
    run_pinned,
    select_gpus,
    visible_gpus,
)
from codevolve.problems import registry
from codevolve.services.runtime.workers import WorkerOptions, run_worker_process


def run_gpu_workers(
    url: str,
    *,
    capability: str,
    gpus_wanted: str | None,
    concurrency: int,
    name: str | None,
    options: WorkerOptions,
) -> int:
    """The worker(s) of ``codevolve worker --capability gpu [--gpus all|IDS]``; with several GPUs,
    a copy of this command per GPU (``sys.argv`` is passed on, with ``--gpus`` per copy)."""
    if capability != "gpu":
        raise ConfigError("--gpus needs --capability gpu")
    gpus = select_gpus(gpus_wanted or "all", visible_gpus())
    if not gpus:
        raise ConfigError("--capability gpu: no GPU is visible here")
    if len(gpus) > 1:
        return run_pinned(pinned_commands(sys.argv[1:], gpus), gpus)
    (device,) = open_devices(gpus, registry.device_jobs().values())
    with device:
        return run_worker_process(url, "gpu", concurrency, name, options=options, device=device)
