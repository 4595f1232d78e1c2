"""The device process's judging layer: one device and one pool of runners that the judge of
every GPU problem uses (KernelBench's ``kb.judge``, gemm-kernel-gpu's ``kernel.measure``).

A candidate of either runs only in a runner of this pool (runner.py): a throw-away caged process
of its own; the judges (kb_judge.py, kernel_judge.py) keep the inputs, the references, the
comparison and the clock here.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import functools
import os

import torch

from codevolve.evaluator_workers.gpu.runner_link import RunnerPool, RunnerSettings

DEVICE_ENV = "CODEVOLVE_KB_DEVICE"  # "cpu" forces the CPU where a GPU is visible


@functools.cache
def device() -> str:
    """The judges' device, chosen once (before a loader cuts the environment down)."""
    if os.environ.get(DEVICE_ENV, "").lower() == "cpu" or not torch.cuda.is_available():
        return "cpu"
    return "cuda"


@functools.cache
def runners() -> RunnerPool:
    """The runners of this device process, started ahead of need (shutdown() ends them)."""
    return RunnerPool(RunnerSettings(device=device()))


def shutdown() -> None:
    """End the runners this process started: the KernelBench reference timers', then the
    pool's."""
    from codevolve.evaluator_workers.gpu.kb_timing import REFERENCE_RUNNERS

    REFERENCE_RUNNERS.close()
    if runners.cache_info().currsize:
        runners().close()
        runners.cache_clear()
