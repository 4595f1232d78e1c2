"""The CUDA device a device process holds, as every measurement taken on it records it.

Imports torch, not Triton: the KernelBench judge describes its device with it too, and runs where
Triton may be missing (``--gpus cpu``). Imported only in the device process, which serves
:func:`info_job` as its generic ``info`` job.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import Any

import torch

INDEX_ENV = "CODEVOLVE_DEVICE_INDEX"  # the host's index of the one GPU this process sees


def cuda_device_info() -> dict[str, object]:
    """The device's name, host index and size (SMs, L2, memory), with torch's and CUDA's
    versions."""
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "index": int(os.environ.get(INDEX_ENV, "0")),
        "sms": props.multi_processor_count,
        "l2_bytes": props.L2_cache_size,
        "memory_bytes": props.total_memory,
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
    }


def device_info(device: str) -> dict[str, Any]:
    """The judges' device (``"cuda"`` or ``"cpu"``) described, with its type."""
    if device == "cuda":
        return {"type": "cuda", **cuda_device_info()}
    return {
        "type": "cpu",
        "name": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


# ``info`` reads the device's properties and never runs on it: it does not wait for the device
# (device_process.py), so a stage that only asks what the device is answers in milliseconds
# while other programs are timed.
CONCURRENT_JOBS = frozenset({"info_job"})


def info_job(payload: object, alive: Callable[[], None] | None = None) -> dict[str, object]:
    """The generic ``info`` device job: the device this process holds, with the libraries'
    versions; a device process that sees no GPU (``--gpus cpu``) describes its CPU."""
    del payload, alive
    info = cuda_device_info() if torch.cuda.is_available() else device_info("cpu")
    try:
        import triton
    except ImportError:  # a KernelBench judge runs without Triton
        return info
    return {**info, "triton": triton.__version__}
