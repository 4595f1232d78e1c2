"""The device jobs of the GEMM backend, as the device process runs them (torch and Triton here).

gemm-tiling-gpu's plug-in names them; a device process imports this module on the first of
them. Payloads and replies are plain data:

- ``gemm.measure`` (:func:`measure_job`): ``{"pairs": [[M, N, K, bm, bn, bk, warps, stages,
  group_m], ...], "seed": int, "samples": int, "check": bool, "use_cache": bool}`` ->
  ``{"device": info, "timings": [Timing as a dict, ...]}`` in the order of ``pairs``.
- ``gemm.precompile`` (:func:`precompile_job`): ``{"configs": [[bm, bn, bk, warps, stages,
  group_m], ...], "workers": int}`` -> ``{"errors": {"bm,bn,...": message}}``; compiles in
  parallel processes into Triton's disk cache, so the first measurement of each config only
  loads it.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from codevolve.problems.gemm_tiling.gpu_timing import timing_dict
from codevolve.problems.gemm_tiling_gpu.device.gemm_bench import (
    GemmBench,
    compile_config,
    device_info,
)
from codevolve.problems.gemm_tiling_gpu.device.kernel import Config


class JobError(Exception):
    """A malformed payload: an error reply; the device process lives on."""


COMPILE_WORKERS = max(1, min(8, (os.cpu_count() or 2) - 4))  # leave cores to the sandbox


@functools.cache
def _bench() -> GemmBench:
    return GemmBench(compile_workers=COMPILE_WORKERS)


def _config(values: Any) -> Config:
    if not isinstance(values, list) or len(values) != 6 or any(type(v) is not int for v in values):
        raise JobError(f"a config is six ints, not {values!r}")
    return (values[0], values[1], values[2], values[3], values[4], values[5])


def measure_job(payload: Any) -> Any:
    if not isinstance(payload, dict) or not isinstance(payload.get("pairs"), list):
        raise JobError("gemm.measure needs a dict with a list 'pairs'")
    pairs = []
    for row in payload["pairs"]:
        if not isinstance(row, list) or len(row) != 9:
            raise JobError(f"a pair is [M, N, K] + six config ints, not {row!r}")
        shape = (int(row[0]), int(row[1]), int(row[2]))
        pairs.append((shape, _config(row[3:])))
    timings = _bench().measure(
        pairs,
        seed=int(payload.get("seed", 0)),
        samples=max(3, int(payload.get("samples", 15))),
        check=bool(payload.get("check", True)),
        use_cache=bool(payload.get("use_cache", True)),
    )
    return {"device": device_info(), "timings": [timing_dict(t) for t in timings]}


def precompile_job(payload: Any) -> Any:
    if not isinstance(payload, dict) or not isinstance(payload.get("configs"), list):
        raise JobError("gemm.precompile needs a dict with a list 'configs'")
    configs = [_config(c) for c in payload["configs"]]
    errors = precompile(configs, workers=max(1, int(payload.get("workers", 8))))
    return {"errors": {",".join(map(str, c)): e for c, e in errors.items()}}


def precompile(configs: list[Config], *, workers: int) -> dict[Config, str]:
    """Compile ``configs`` in ``workers`` processes into Triton's disk cache; the failures."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        errors = list(pool.map(compile_config, configs, chunksize=2))
    return {c: e for c, e in zip(configs, errors, strict=True) if e}


def shutdown() -> None:
    """Called by the device process before it ends: stop the GEMM bench's compile workers, if
    started."""
    if _bench.cache_info().currsize:
        _bench().close()
