"""cuBLAS's times per shape on the judge's device, kept for the candidates judged after them
(trusted code of the judge).

A candidate's figure per shape is t_cuBLAS / t_candidate, cuBLAS timed through the candidate's
own path (kernel_timing.py) in a trusted runner. cuBLAS's time depends on the shape, the plan
(calls per batch, batches) and the device, never on a candidate: a device process times a shape
once and gives that time to every candidate judged on the same plan within ``max_age_s``, then
times it again. Each plan's batch size comes from cuBLAS's time of one call measured here once
per shape (:func:`~.kernel_timing.reference_ms`), so a candidate and the cuBLAS time it is set
against ran the same plan. ``max_age_s`` 0 keeps nothing: every judging times cuBLAS on its own
shapes after its candidate, as before the pipeline.

What keeping costs: cuBLAS is no longer timed minutes-close to every candidate, so a device that
drifts (clocks under heat) moves the ratios of the candidates timed in between by as much; the
age limit bounds it, and a would-be best is re-measured before it is reported.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from codevolve.evaluator_workers.gpu.remote import CandidateProblem, start_remote
from codevolve.evaluator_workers.gpu.runner_link import RunnerPool
from codevolve.evaluator_workers.gpu.shared_tensors import Arena
from codevolve.problems.gemm_kernel_gpu.device.kernel_bench import set_bytes, workspace_bytes
from codevolve.problems.gemm_kernel_gpu.device.kernel_role import ROLE
from codevolve.problems.gemm_kernel_gpu.device.kernel_timing import (
    Plan,
    batch_size,
    reference_ms,
    stop,
    time_shape,
)
from codevolve.problems.gemm_tiling.gpu_timing import Shape

Timed = tuple[Shape, Plan]  # what a cuBLAS time is kept for


@dataclass(frozen=True, slots=True)
class _Kept:
    times: tuple[float, ...]  # ms per call, per timed batch
    at: float  # time.monotonic() when it was timed


class References:
    """cuBLAS per (shape, plan) on one device, timed in a trusted runner and kept a while
    (thread-safe; the caller holds the device while it plans or times)."""

    def __init__(self, device: str, runners: RunnerPool, *, num_sms: int, max_age_s: float):
        self.device = device
        self.runners = runners
        self.num_sms = num_sms
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._call_ms: dict[Shape, float] = {}  # cuBLAS's time of one call: sizes the batches
        self._kept: dict[Timed, _Kept] = {}
        self.timed = 0  # shapes timed here so far (the rest were kept ones)

    def plan(self, shape: Shape, *, samples: int, warmup: int, timed: bool) -> Plan:
        """How ``shape`` is timed: calls per batch from cuBLAS's time of one call here."""
        took = self._one_call_ms(shape) if timed else 1.0
        return Plan(batch_size(shape, took, self.device), warmup, samples)

    def _one_call_ms(self, shape: Shape) -> float:
        with self._lock:
            known = self._call_ms.get(shape) if self.max_age_s > 0 else None
        if known is None:
            known = reference_ms(shape, self.device)
            with self._lock:
                self._call_ms[shape] = known
        return known

    def times(self, wanted: Sequence[Timed]) -> dict[Timed, list[float]]:
        """cuBLAS's times of each of ``wanted``: those kept within the age limit, the others
        timed now in one trusted runner."""
        now = time.monotonic()
        found: dict[Timed, list[float]] = {}
        with self._lock:
            for key in wanted:
                kept = self._kept.get(key)
                if kept is not None and now - kept.at <= self.max_age_s:
                    found[key] = list(kept.times)
        missing = list(dict.fromkeys(key for key in wanted if key not in found))
        if missing:
            measured = self._time(missing)
            found.update(measured)
            with self._lock:
                self.timed += len(measured)
                if self.max_age_s > 0:
                    at = time.monotonic()
                    for key, times in measured.items():
                        self._kept[key] = _Kept(tuple(times), at)
        return found

    def _time(self, missing: list[Timed]) -> dict[Timed, list[float]]:
        needed = max(p.batch * set_bytes(s) + workspace_bytes(s, self.device) for s, p in missing)
        arena = Arena.create(needed, self.device)
        rng = random.Random()
        try:
            remote = start_remote(self.runners, arena, "", trusted=True, role=ROLE, who="cuBLAS")
            try:
                stop(remote)
                return {
                    (shape, plan): time_shape(
                        remote, arena, shape, plan,
                        salt=rng.getrandbits(62), num_sms=self.num_sms, check=False,
                    )[0]
                    for shape, plan in missing
                }  # fmt: skip
            finally:
                remote.close()
        except CandidateProblem as exc:  # trusted code: the device or the judge is at fault
            raise RuntimeError(f"timing cuBLAS failed: {exc}") from None
        finally:
            arena.close()
