"""The GPU stages' use of the launch store: which shapes the store already answers, the device
job for the rest, and the fresh timings the stage hands back (docs/launch-store.md).

A shape is answered by a stored timing only when the program's launch for it was read from the
source (launches.py) and the timing was taken on a device of the same model under the same
harness version; the ragged check shapes are answered by a stored check of the same launch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from codevolve.core.device import Device
from codevolve.core.launch_store import CHECKED_ONLY, LaunchKey, StoredTiming
from codevolve.problems.gemm_kernel_gpu.launches import Shape

# The judge's harness (kernel_judge.py, kernel_timing.py, kernel_bench.py): bump it whenever
# what a timing means changes (the clock, the batches, the flush, the checks), and every stored
# timing is set aside. 2: cuBLAS's time of a shape kept a while for the candidates judged
# after it (device/kernel_references.py), no longer timed after each candidate.
HARNESS_VERSION = "kernel.measure/2"
INFO_JOB = "info"
INFO_TIMEOUT_S = 60.0


def device_key(info: Mapping[str, Any]) -> tuple[str, str]:
    """The GPU model and harness version a device's info describes."""
    versions = "|".join(f"{name} {info.get(name)}" for name in ("torch", "triton", "cuda"))
    return str(info.get("name")), f"{HARNESS_VERSION}|{versions}"


@dataclass(frozen=True, slots=True)
class Answered:
    """What the store answers for one judging, and what it leaves to the device."""

    keys: Mapping[Shape, LaunchKey] | None  # None: the program is outside the readable form
    stored: Mapping[Shape, StoredTiming]  # per shape answered (timed or checked)
    checks: tuple[Shape, ...]  # check shapes left to the device
    timed: tuple[Shape, ...]  # timed shapes left to the device


def answer(
    keys: Mapping[Shape, LaunchKey] | None,
    stored: Sequence[StoredTiming],
    device: Device,
    *,
    checks: Sequence[Shape],
    timed: Sequence[Shape],
) -> Answered:
    """Split the judging between the store and the device (asks the device its model only
    when there are stored timings to match)."""
    held: dict[Shape, StoredTiming] = {}
    if keys is not None and stored:
        reply = device.run(INFO_JOB, None, timeout_s=INFO_TIMEOUT_S)
        if reply.ok and isinstance(reply.value, dict):
            gpu, harness = device_key(reply.value)
            mine = {t.key: t for t in stored if (t.gpu, t.harness) == (gpu, harness)}
            for shape in checks:
                if keys[shape] in mine:
                    held[shape] = mine[keys[shape]]
            for shape in timed:
                found = mine.get(keys[shape])
                if found is not None and found.timed:
                    held[shape] = found
    return Answered(
        keys=keys,
        stored=held,
        checks=tuple(s for s in checks if s not in held),
        timed=tuple(s for s in timed if s not in held),
    )


def stored_row(timing: StoredTiming) -> dict[str, Any]:
    """A stored timing as the judge's reply row (kernel_jobs.py's format)."""
    return {
        "status": "ok",
        "t_us": timing.t_us,
        "cublas_us": timing.cublas_us,
        "samples": timing.samples,
        "detail": "from the launch store",
    }


def fresh_timings(
    answered: Answered, value: Mapping[str, Any], rows: Mapping[Shape, Mapping[str, Any]]
) -> tuple[StoredTiming, ...]:
    """The device's timings of this judging, keyed for the store (none where the program's
    launches could not be read). ``rows``: the reply's row per timed shape sent."""
    if answered.keys is None:
        return ()
    gpu, harness = device_key(value.get("device") or {})
    keys = answered.keys
    checked = [
        StoredTiming(keys[s], gpu, harness, t_us=0.0, cublas_us=0.0, samples=CHECKED_ONLY)
        for s in answered.checks
    ]
    timed = [
        StoredTiming(
            keys[s],
            gpu,
            harness,
            t_us=float(row["t_us"]),
            cublas_us=float(row["cublas_us"]),
            samples=max(1, int(row.get("samples", 1))),
        )
        for s, row in rows.items()
    ]
    return (*checked, *timed)
