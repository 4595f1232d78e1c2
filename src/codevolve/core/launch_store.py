"""Measurements kept per launch: what a stored timing is of, and the timing itself.

A GPU problem whose program picks a launch per case (a kernel and its parameters per GEMM shape)
can be scored from timings already taken when a child only re-routes cases to launches measured
before. A :class:`LaunchKey` names what ran: the hash of the kernel sources the launch reaches,
the launch's parameters as canonical text, and the case. A :class:`StoredTiming` is one judge's
figures for a key on one GPU model under one harness version. The problem derives keys from a
program's source by reading it, never running it (gemm-kernel-gpu's launches.py); only the
judge's replies write timings (docs/launch-store.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

CHECKED_ONLY = 0  # samples of a timing that records a passed check, not a time


@dataclass(frozen=True, slots=True)
class LaunchKey:
    """What one case of a program ran: the kernel code, the launch, the case."""

    kernel_hash: str  # sha256 hex of the kernel sources the launch reaches
    launch: str  # the launch's parameters as canonical text, e.g. "launch_split_k(16, 64, ...)"
    case: str  # the case key, e.g. "M=16 N=6144 K=4096"


@dataclass(frozen=True, slots=True)
class StoredTiming:
    """The judge's figures for one key on one GPU model under one harness version.

    ``samples == CHECKED_ONLY`` records a case that was checked right and never timed (a ragged
    shape): it stands in for the check, not for a time.
    """

    key: LaunchKey
    gpu: str  # the device's model as the judge reported it, e.g. "NVIDIA H100 80GB HBM3"
    harness: str  # the judge's harness version; timings of another version are never reused
    t_us: float  # median microseconds per call of the launch
    cublas_us: float  # median microseconds of cuBLAS, timed in the same judging
    samples: int  # timed batches behind the medians
    job_id: str = ""  # the job whose evaluation measured it
    program_id: str = ""
    measured_at: datetime | None = None

    @property
    def timed(self) -> bool:
        return self.samples > CHECKED_ONLY
