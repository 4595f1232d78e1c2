"""The KernelBench judge as tests use it: its loader and runner pools on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codevolve.evaluator_workers.gpu.runner_link import RunnerPool, RunnerSettings
from codevolve.problems.kernelbench.device.kb_judge import JudgeSettings, judge
from codevolve.problems.kernelbench.device.kb_loader import KbLoader
from codevolve.problems.kernelbench.device.kb_timing import REFERENCE_RUNNERS


class Judges:
    """The judge's loader and its runners on the CPU: with the source rules, and without."""

    def __init__(self, directory: Path) -> None:
        self.loader = KbLoader(directory, environ={})
        self.runners = RunnerPool(RunnerSettings(device="cpu"))
        self.loose = RunnerPool(RunnerSettings(device="cpu", rules=False), warm=1)
        self.rules = True

    def close(self) -> None:
        REFERENCE_RUNNERS.close()
        self.runners.close()
        self.loose.close()

    def judge(self, reference: str, candidate: str, **settings: Any) -> dict[str, Any]:
        """Judge on the CPU with quick settings unless given (lists become tuples)."""
        fields = {"trials": 5, "warmup": 1, "time": False, **settings}
        for key in ("seeds", "distributions", "forbid", "baselines"):
            if key in fields:
                fields[key] = tuple(fields[key])
        return judge(
            reference,
            candidate,
            JudgeSettings(**fields),
            device="cpu",
            loader=self.loader,
            runners=self.runners if self.rules else self.loose,
        )
