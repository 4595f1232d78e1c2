"""The gemm-kernel-gpu judge as tests use it: runner pools on the CPU, with the source rules
and without."""

from __future__ import annotations

from typing import Any

from codevolve.evaluator_workers.gpu.runner_link import RunnerPool, RunnerSettings
from codevolve.problems.gemm_kernel_gpu.device.kernel_judge import MeasureSettings, measure

HONEST = """
def matmul(x, w, y, workspace, num_sms):
    y.copy_(x.float() @ w.float().t())
"""


class KernelJudges:
    """The judge's runners on the CPU: with the source rules, and without."""

    def __init__(self) -> None:
        self.runners = RunnerPool(RunnerSettings(device="cpu"), warm=1)
        self.loose = RunnerPool(RunnerSettings(device="cpu", rules=False), warm=1)
        self.rules = True

    def close(self) -> None:
        self.runners.close()
        self.loose.close()

    def measure(
        self,
        source: str,
        shapes: list[tuple[int, int, int]] | None = None,
        **settings: Any,
    ) -> dict[str, Any]:
        """Judge on the CPU with quick settings unless given."""
        fields = {"samples": 3, "warmup": 1, "time": False, **settings}
        fields["check_shapes"] = tuple(fields.get("check_shapes", ()))
        return measure(
            source,
            MeasureSettings(shapes=tuple(shapes or [(8, 32, 64)]), **fields),
            device="cpu",
            runners=self.runners if self.rules else self.loose,
        )
