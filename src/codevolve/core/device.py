"""Accelerators as stages see them: a worker's device, and stages that need one.

A worker holds zero or more capabilities ("cpu" always; "gpu" when it holds a device). A stage
declares the capability it needs; a stage needing "gpu" is given the worker's :class:`Device`, a
trusted service that runs named jobs (check and time a kernel, say) in a process of its own, so a
fault of the device (a CUDA illegal address) fails one program and never the worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from codevolve.core.problem import Candidate, JSONValue, Threshold
from codevolve.core.program import StageResult

CPU = "cpu"  # every worker has it: the sandbox and the cost models
GPU = "gpu"  # a worker that holds a CUDA device


@dataclass(frozen=True, slots=True)
class DeviceReply:
    """The value a device job returned, or why it did not return one.

    ``fault`` means the device process died or raised (its CUDA context may be poisoned): it has
    been recycled, and the program whose job it was fails.
    """

    value: JSONValue = None
    error: str = ""
    fault: bool = False

    @property
    def ok(self) -> bool:
        return not self.error and not self.fault


class Device(Protocol):
    """One accelerator held by a worker."""

    @property
    def index(self) -> int:
        """The device's index on its host (as ``nvidia-smi`` numbers it)."""
        ...

    @property
    def capability(self) -> str: ...

    def run(self, job: str, payload: JSONValue, *, timeout_s: float) -> DeviceReply:
        """Run the trusted job ``job`` on ``payload`` (plain data) on the device."""
        ...


@runtime_checkable
class DeviceStage(Protocol):
    """A stage that runs on a device; the cascade hands it the worker's device."""

    @property
    def name(self) -> str: ...

    @property
    def threshold(self) -> Threshold | None: ...

    @property
    def capability(self) -> str: ...

    def run_on(self, candidate: Candidate, device: Device, rng: np.random.Generator) -> StageResult:
        """Judge the candidate with the device's help; device faults are failed results."""
        ...


def capability_of(stage: object) -> str:
    """The capability a stage needs: its own ``capability`` attribute, else "cpu"."""
    value = getattr(stage, "capability", CPU)
    return value if isinstance(value, str) else CPU


def needed_capabilities(stages: Sequence[object]) -> frozenset[str]:
    return frozenset(capability_of(stage) for stage in stages)
