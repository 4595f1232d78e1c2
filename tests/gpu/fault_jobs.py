"""Device jobs for the GPU tests: one that writes through a wild pointer (a real CUDA fault)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def _wild_store(ptr):  # type: ignore[no-untyped-def]
    tl.store(ptr + (1 << 40), 1.0)


def _wild(payload: Any) -> Any:
    del payload
    x = torch.zeros(16, device="cuda")
    _wild_store[(1,)](x)
    torch.cuda.synchronize()
    return "survived"


def _info(payload: Any) -> Any:
    del payload
    x = torch.ones(1024, device="cuda")
    return float(x.sum())


JOBS: dict[str, Callable[[Any], Any]] = {"wild": _wild, "info": _info}
TARGETS = {name: f"{__name__}:{function.__name__}" for name, function in JOBS.items()}
