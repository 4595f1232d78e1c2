"""The compile role of a gemm-kernel-gpu runner: a program's kernels compiled for the judge's
GPU and none launched (runner_role.py says what a role is).

A compile runner (``RunnerSettings.compile_only``) has no GPU: none is visible, and its cage lets
it write or ioctl no device file. Triton is told the judge's GPU (its architecture) by a driver of
this module that knows nothing else, and every launch ``kernel[grid](...)`` becomes Triton's
warm-up: the kernel is specialised and compiled for its arguments as a launch would have it, into
the runner's Triton cache, and not run. The arguments are tensors on torch's ``meta`` device with
the shapes, dtypes and strides of the judge's buffers (no memory, no data), so the program's host
code takes the paths it takes in the timing runner and asks for the same kernels.

Nothing a compile runner does is believed. What the judge takes from it is a folder of files that
the timing runner of the same source starts with (``Runner.seed_kernels``), which at most saves
that runner compiling; what the program does wrong here is no verdict (the timing runner meets it
again and the judge sees it there), but for a program that does not load at all.

Request ``kernel.compile``: ``{"target": {"backend": "cuda", "arch": 90, "warp_size": 32},
"calls": [[M, N, K, workspace elements], ...], "num_sms": int}`` -> ``{"compiled": calls that
returned, "problems": [str, ...]}`` (the first few).

Imported only in runners (needs torch; Triton when a request comes).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from codevolve.evaluator_workers.gpu.runner_role import Op, RoleContext
from codevolve.evaluator_workers.gpu.source_loader import LoadError
from codevolve.problems.gemm_kernel_gpu.device.kernel_loader import KernelLoader

ROLE = __name__  # what the judge names in its load requests
COMPILE_OP = "kernel.compile"
MAX_PROBLEMS = 5
MESSAGE_CHARS = 200


def warm() -> None:
    """In the zygote: Triton imported once for every runner it forks."""
    import triton.language  # noqa: F401 - imported for the forks


def load(message: dict[str, Any], context: RoleContext) -> CompileRole | str:
    """The role for a ``load`` request, or why the source gave no entry point."""
    loader = KernelLoader(Path(context.scratch) / "programs", rules=context.rules)
    entry = loader.load(str(message["source"]))
    if isinstance(entry, LoadError):
        return entry.message
    return CompileRole(entry)


class CompileRole:
    """One launch function, called on meta tensors with launches turned into compiles."""

    def __init__(self, entry: Callable[..., Any]) -> None:
        self.entry = entry

    def ops(self) -> dict[str, Op]:
        return {COMPILE_OP: self.compile}

    def compile(self, message: dict[str, Any]) -> dict[str, Any]:
        compile_only(message["target"])
        num_sms = int(message.get("num_sms", 1))
        compiled, problems = 0, list[str]()
        for m, n, k, workspace in message["calls"]:
            x, w, y, scratch = _buffers(int(m), int(n), int(k), int(workspace))
            try:
                self.entry(x, w, y, scratch, num_sms)
                compiled += 1
            except Exception as exc:  # noqa: BLE001 - the program's failure: no verdict here
                lines = str(exc).strip().splitlines() or [""]
                problem = f"M={m} N={n} K={k}: {type(exc).__name__}: {lines[0][:MESSAGE_CHARS]}"
                if len(problems) < MAX_PROBLEMS:
                    problems.append(problem)
        return {"compiled": compiled, "problems": problems}


def _buffers(m: int, n: int, k: int, workspace: int) -> tuple[Any, Any, Any, Any]:
    """The judge's buffers of one call as meta tensors: shapes, dtypes and strides, no data."""

    def meta(shape: tuple[int, ...], dtype: Any) -> Any:
        return torch.empty(shape, dtype=dtype, device="meta")

    bf16 = torch.bfloat16
    return (
        meta((m, k), bf16),
        meta((n, k), bf16),
        meta((m, n), bf16),
        meta((workspace,), torch.float32),
    )


class _CompileOnlyDriver:
    """What Triton's JIT asks of a driver on the way to a compile (the target, a device and a
    stream number), and nothing that could load or launch a kernel."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        del device
        return 0


_installed: list[Any] = []


def compile_only(target: dict[str, Any]) -> None:
    """Point Triton at ``target`` through the compile-only driver, and make every launch a
    warm-up (compile, do not run): once per runner."""
    if _installed:
        return
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver, jit

    gpu = GPUTarget(str(target["backend"]), int(target["arch"]), int(target["warp_size"]))
    driver.set_active(_CompileOnlyDriver(gpu))

    def warmup_launch(kernel: Any, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: kernel.run(*args, grid=grid, warmup=True, **kwargs)

    jit.KernelInterface.__getitem__ = warmup_launch
    _installed.append(gpu)
