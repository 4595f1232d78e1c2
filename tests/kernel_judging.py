"""The gemm-kernel-gpu judge as tests use it: runner pools on the CPU, with the source rules
and without."""

from __future__ import annotations

import textwrap
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


# What a hostile gemm-kernel-gpu launch starts with: torch, any module and the real builtins,
# reached through a tensor's class (the loader allows no import of them), and its own socket.
HOSTILE_PRELUDE = """
def _torch(t):
    return t.__class__.__torch_function__.__func__.__globals__["torch"]


def mod(t, name):
    modules = _torch(t).sys.modules
    return modules.get(name) or modules["importlib"].import_module(name)


def builtin(t, name):
    return getattr_of(_torch(t).sys.modules["builtins"], name)


def getattr_of(owner, name):
    return owner.__dict__[name] if name in owner.__dict__ else owner.__getattribute__(name)


def own_socket(t):
    os = mod(t, "os")
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "socket" in os.readlink(f"/proc/self/fd/{fd}"):
                return int(fd)
        except builtin(t, "OSError"):
            pass
    raise ValueError("no socket found")


"""


def hostile_launch(body: str, *, top: str = "", prelude: str = "") -> str:
    """A ``matmul`` launch with ``body`` after the hostile prelude and ``top``."""
    function = "def matmul(x, w, y, workspace, num_sms):\n" + textwrap.indent(
        textwrap.dedent(body), "    "
    )
    return HOSTILE_PRELUDE + prelude + textwrap.dedent(top) + "\n" + function
