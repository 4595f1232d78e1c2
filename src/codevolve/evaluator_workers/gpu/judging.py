"""The device process's judging layer: one device and one pool of runners that the judge of
every GPU problem uses (the problems' device jobs: ``problems/<name>/device/``).

A candidate runs only in a runner of this pool (runner.py): a throw-away caged process of its
own, in the role its judge names (runner_role.py); the judges keep the inputs, the references,
the comparison and the clock here.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import functools
import os

import torch

from codevolve.evaluator_workers.gpu.compile_cache import compile_cache_root
from codevolve.evaluator_workers.gpu.runner_link import RunnerPool, RunnerSettings

DEVICE_ENV = "CODEVOLVE_KB_DEVICE"  # "cpu" forces the CPU where a GPU is visible
# A timed batch runs at least this long, where memory allows: on CUDA some 40 times the batch's
# fixed cost (about 0.5 ms on an H100; docs/security.md); on the CPU well above a busy
# machine's scheduling delays.
BATCH_TARGET_MS = {"cuda": 20.0, "cpu": 10.0}
MAX_BATCH = {"cuda": 2048, "cpu": 16}  # calls in one timed batch (each on fresh inputs)


@functools.cache
def device() -> str:
    """The judges' device, chosen once (before a loader cuts the environment down)."""
    if os.environ.get(DEVICE_ENV, "").lower() == "cpu" or not torch.cuda.is_available():
        return "cpu"
    return "cuda"


@functools.cache
def runners() -> RunnerPool:
    """The runners of this device process, started ahead of need (shutdown() ends them), with
    the worker's torch.compile cache (compile_cache.py) for the trusted runners that compile."""
    return RunnerPool(RunnerSettings(device=device(), compile_cache=compile_cache_root()))


def shutdown() -> None:
    """End the pool's runners, if started (a judge ends its own runners first)."""
    if runners.cache_info().currsize:
        runners().close()
        runners.cache_clear()
