"""A fake device backend: the GEMM jobs' formats without torch, plus ways to fail on purpose.

Used by the tests of the device process, the cascade's routing and the GPU problem's stage on
machines without a GPU; a device process serves :data:`TARGETS` as it serves the problems'
device jobs (``"package.module:function"``, imported in the device process). Times follow a
roofline-like formula (microseconds), deterministic.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

PEAK_FLOPS = 8e14  # FLOP/s
HBM_BYTES_PER_S = 4e12
LAUNCH_US = 4.0


class JobError(Exception):
    """A malformed payload: an error reply; the process lives on."""


def fake_time_us(m: int, n: int, k: int, config: list[int]) -> float:
    """A smooth stand-in for a time: bigger tiles compute faster, tiny grids stream slower."""
    block_m, block_n, block_k, warps, stages, _group = config
    tiles = math.ceil(m / block_m) * math.ceil(n / block_n)
    efficiency = min(1.0, block_m * block_n / 16384) * min(1.0, warps / 4) ** 0.3
    compute = 2 * max(m, block_m) * n * k / (PEAK_FLOPS * max(efficiency, 0.05))
    streaming = min(1.0, tiles * stages * block_k / 8192)
    memory = 2 * (m * k + n * k + m * n) / (HBM_BYTES_PER_S * max(streaming, 0.05))
    return float(LAUNCH_US + 1e6 * max(compute, memory))


def _info(payload: Any) -> Any:
    del payload
    return {"name": "Fake GPU", "index": int(os.environ.get("CODEVOLVE_DEVICE_INDEX", "0"))}


def _measure(payload: Any) -> Any:
    if not isinstance(payload, dict) or not isinstance(payload.get("pairs"), list):
        raise JobError("gemm.measure needs a dict with a list 'pairs'")
    timings = []
    for row in payload["pairs"]:
        m, n, k, *config = row
        t = fake_time_us(m, n, k, config)
        cublas = 0.9 * fake_time_us(m, n, k, [128, 128, 64, 8, 4, 8])
        timings.append(
            {
                "status": "ok",
                "t_us": t,
                "p20_us": t,
                "p80_us": t,
                "cublas_us": cublas,
                "samples": int(payload.get("samples", 15)),
                "detail": "",
            }
        )
    return {"device": _info(None), "timings": timings}


def _fault(payload: Any) -> Any:
    del payload
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def _crash(payload: Any) -> Any:
    del payload
    os._exit(1)


def _hang(payload: Any) -> Any:
    time.sleep(float(payload))
    return None


def _hold(payload: Any) -> Any:
    """Holds the device (an ordinary job) for ``payload`` seconds: when it ran, by the clock."""
    started = time.monotonic()
    time.sleep(float(payload))
    return [started, time.monotonic()]


def _pipelined(payload: Any, alive: Callable[[], None]) -> Any:
    """A job that shares the device (CONCURRENT_JOBS): ``payload["s"]`` seconds, off the device,
    saying it is alive every ``payload["every"]`` seconds (0: never); when it ran."""
    started = time.monotonic()
    every = float(payload.get("every", 0))
    while time.monotonic() - started < float(payload["s"]):
        time.sleep(every or 0.05)
        if every:
            alive()
    return [started, time.monotonic()]


def _whoami(payload: Any) -> Any:
    del payload
    return {
        "pid": os.getpid(),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "index": os.environ.get("CODEVOLVE_DEVICE_INDEX", ""),
    }


JOBS: dict[str, Callable[..., Any]] = {
    "info": _info,
    "gemm.measure": _measure,
    "fault": _fault,
    "crash": _crash,
    "hang": _hang,
    "whoami": _whoami,
    "hold": _hold,
    "pipelined": _pipelined,
}
CONCURRENT_JOBS = frozenset({"_pipelined"})  # the device process calls it with ``alive``
# The table a DeviceProcess is given: each job by its dotted path, imported in the device process.
TARGETS = {name: f"{__name__}:{function.__name__}" for name, function in JOBS.items()}
