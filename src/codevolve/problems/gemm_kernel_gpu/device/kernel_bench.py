"""The buffers a gemm-kernel-gpu candidate works on, and the checks the judge makes of them
(trusted code of the judge).

The candidate is a launch function ``matmul(x, w, y, workspace, num_sms)`` that must write
``y = x @ w.T`` (x [M, K], w [N, K], y [M, N], bf16; fp32 accumulation) using only ``workspace``
(fp32, at least :func:`workspace_elements` elements, contents undefined) as scratch. It runs in a
runner (kernel_role.py); every buffer lives in the judge's arena (shared_tensors.py), so the judge
reads what the candidate wrote from its own memory once the runner is stopped. What each check
catches:

- a wrong result: fresh inputs from three distributions (normal, uniform, small integers, the
  last bit-exact since fp32 accumulation is exact there), each time into an output poisoned with
  NaN inside a NaN guard band: every element written, finite, within bf16 tolerance;
- writes outside the output (the guard rows of y and the guard tail of the workspace keep their
  NaN) and writes to the inputs (x and w compared with the judge's private copies);
- reads of uninitialised memory: the workspace is poisoned with NaN before every call, so a
  split-K that accumulates into scratch it did not clear produces NaN;
- an answer sent before the work is done (work left on another stream, a thread, a patched
  synchronise): the output is read when the runner has answered and been stopped, and reads as
  NaN where the work had not landed.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from codevolve.evaluator_workers.gpu.shared_tensors import Arena
from codevolve.problems.gemm_tiling.gpu_timing import ATOL_OF_RMS, RTOL, Shape

GUARD_ROWS = 1  # NaN rows above and below y
WORKSPACE_GUARD = 4096  # NaN elements after the workspace
MIN_WORKSPACE = 1 << 24  # elements (64 MiB of fp32) on CUDA
MIN_WORKSPACE_CPU = 1 << 12  # elements on the CPU, where only tests run candidates
DISTRIBUTIONS = ("normal", "uniform", "small integers")


def workspace_elements(m: int, n: int, device: str = "cuda") -> int:
    """fp32 scratch a candidate may use: four partial outputs, and at least 64 MiB on CUDA."""
    return max(4 * m * n, MIN_WORKSPACE if device == "cuda" else MIN_WORKSPACE_CPU)


def _sub_spec(spec: dict[str, Any], shape: list[int], skip_bytes: int) -> dict[str, Any]:
    """The description of a contiguous ``shape`` that starts ``skip_bytes`` into ``spec``."""
    stride = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    return {**spec, "shape": shape, "stride": stride, "offset": spec["offset"] + skip_bytes}


@dataclass(slots=True)
class InputSet:
    """One call's buffers in the arena: the inputs and the guarded output, and their
    descriptions for the runner."""

    x: torch.Tensor
    w: torch.Tensor
    guarded_y: torch.Tensor
    specs: dict[str, Any]

    @classmethod
    def place(cls, arena: Arena, shape: Shape) -> InputSet:
        m, n, k = shape
        x, x_spec = arena.place(torch.empty((m, k), dtype=torch.bfloat16, device="meta"))
        w, w_spec = arena.place(torch.empty((n, k), dtype=torch.bfloat16, device="meta"))
        rows = m + 2 * GUARD_ROWS
        guarded, y_spec = arena.place(torch.empty((rows, n), dtype=torch.bfloat16, device="meta"))
        y_spec = _sub_spec(y_spec, [m, n], GUARD_ROWS * n * 2)
        return cls(x, w, guarded, {"x": x_spec, "w": w_spec, "y": y_spec})

    @property
    def y(self) -> torch.Tensor:
        return self.guarded_y[GUARD_ROWS : GUARD_ROWS + self.x.shape[0]]

    def guards_problem(self) -> str:
        m = self.x.shape[0]
        rows = torch.cat([self.guarded_y[:GUARD_ROWS], self.guarded_y[GUARD_ROWS + m :]])
        return "" if bool(torch.isnan(rows).all()) else "wrote outside the output"


@dataclass(slots=True)
class Workspace:
    """The candidate's scratch in the arena, with a NaN guard tail."""

    guarded: torch.Tensor
    spec: dict[str, Any]

    @classmethod
    def place(cls, arena: Arena, elements: int) -> Workspace:
        like = torch.empty(elements + WORKSPACE_GUARD, dtype=torch.float32, device="meta")
        guarded, spec = arena.place(like)
        return cls(guarded, _sub_spec(spec, [elements], 0))

    def guard_problem(self) -> str:
        tail = self.guarded[-WORKSPACE_GUARD:]
        return "" if bool(torch.isnan(tail).all()) else "wrote past the end of the workspace"


def set_bytes(shape: Shape) -> int:
    """Arena bytes of one :class:`InputSet` (alignment included)."""
    m, n, k = shape
    return sum(-(-b // 512) * 512 + 512 for b in (2 * m * k, 2 * n * k, 2 * (m + 2) * n))


def workspace_bytes(shape: Shape, device: str) -> int:
    return 4 * (workspace_elements(shape[0], shape[1], device) + WORKSPACE_GUARD) + 1024


def fill(x: torch.Tensor, w: torch.Tensor, distribution: str, seed: int) -> None:
    """Fresh inputs in place from ``seed`` (the same seed draws the same values again)."""
    gen = torch.Generator(device=x.device)
    gen.manual_seed(seed)
    k = x.shape[1]
    if distribution == "small integers":
        x.random_(-2, 3, generator=gen)
        w.random_(-2, 3, generator=gen)
        return
    if distribution == "uniform":
        x.uniform_(-1.0, 1.0, generator=gen)
    else:
        x.normal_(generator=gen)
    w.normal_(std=1 / math.sqrt(k), generator=gen)


def poison(tensor: torch.Tensor) -> None:
    tensor.fill_(math.nan)


def tolerance_problem(y: torch.Tensor, ref: torch.Tensor) -> str:
    """Why ``y`` (bf16) is not ``ref`` (fp32) within bf16 tolerance, or "" (NaN is wrong)."""
    atol = ATOL_OF_RMS * float(ref.pow(2).mean().sqrt()) if ref.numel() else 0.0
    error = (y.float() - ref).abs()
    bad = ~(error <= RTOL * ref.abs() + atol)  # NaN compares false: counted bad
    if bool(bad.any()):
        return f"{int(bad.sum())} elements wrong or unwritten (max error {float(error.max()):.3g})"
    return ""


class CheckedCall:
    """One checked call's inputs: private copies and the fp32 reference, kept by the judge."""

    def __init__(self, inputs: InputSet, distribution: str, seed: int) -> None:
        fill(inputs.x, inputs.w, distribution, seed)
        self.inputs = inputs
        self.distribution = distribution
        self.x0, self.w0 = inputs.x.clone(), inputs.w.clone()
        self.ref = self.x0.float() @ self.w0.float().t()

    def problem(self, workspace: Workspace) -> str:
        """What the call did wrong, read from the arena after the runner stopped ("" if
        right)."""
        inputs = self.inputs
        wrong = tolerance_problem(inputs.y, self.ref)
        if not wrong and self.distribution == "small integers":
            exact = inputs.y == self.ref.to(torch.bfloat16)
            wrong = "" if bool(exact.all()) else f"{int((~exact).sum())} elements not exact"
        wrong = wrong or inputs.guards_problem() or workspace.guard_problem()
        if not wrong and not (torch.equal(inputs.x, self.x0) and torch.equal(inputs.w, self.w0)):
            wrong = "the launch changed its inputs"
        return wrong
