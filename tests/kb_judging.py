"""The KernelBench judge as tests use it: its loader and runner pools on the CPU."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

from codevolve.evaluator_workers.gpu.runner_link import RunnerPool, RunnerSettings
from codevolve.problems.kernelbench.device.kb_baselines import REFERENCE_RUNNERS
from codevolve.problems.kernelbench.device.kb_judge import JudgeSettings, judge
from codevolve.problems.kernelbench.device.kb_loader import KbLoader


class Judges:
    """The judge's loader and its runners on the CPU: with the source rules, and without."""

    def __init__(
        self, directory: Path, *, compile_cache: str = "", layers: tuple[str, ...] | None = None
    ) -> None:
        """``compile_cache``: the runners' torch.compile cache folder (none: scratch folders);
        ``layers``: the cage's optional layers (default: all)."""
        settings = RunnerSettings(device="cpu", compile_cache=compile_cache)
        if layers is not None:
            settings = dataclasses.replace(settings, layers=layers)
        self.loader = KbLoader(directory, environ={})
        self.runners = RunnerPool(settings)
        self.loose = RunnerPool(dataclasses.replace(settings, rules=False), warm=1)
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


# What a hostile KernelBench candidate starts with: the real builtins and any module, reached
# through torch (the loader's cut table is a filter too), and the runner's own socket.
HOSTILE_PRELUDE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

SYS = torch.sys
B = SYS.modules["builtins"]  # the real builtins: the loader's table is a filter too


def mod(name):
    return SYS.modules.get(name) or SYS.modules["importlib"].import_module(name)


def own_socket():
    os = mod("os")
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "socket" in os.readlink(f"/proc/self/fd/{fd}"):
                return int(fd)
        except B.OSError:
            pass
    raise RuntimeError("no socket found")


"""
RELU = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.rand(16, 64)]

def get_init_inputs():
    return []
"""


def hostile_model_new(forward: str, *, top: str = "", init: str = "", prelude: str = "") -> str:
    """A ``ModelNew`` with ``forward`` (and ``init``) after the hostile prelude and ``top``."""
    body = textwrap.indent(textwrap.dedent(forward), "    ")
    if init:
        body = textwrap.indent(textwrap.dedent(init), "    ") + "\n" + body
    head = HOSTILE_PRELUDE + prelude + textwrap.dedent(top)
    return head + "\nclass ModelNew(nn.Module):\n" + body
