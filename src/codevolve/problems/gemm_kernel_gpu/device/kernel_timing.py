"""Timing a gemm-kernel-gpu candidate and cuBLAS through the same runner path (trusted code).

A timed batch is ``K`` calls, each on an input set of its own in the judge's arena
(:class:`Batch`):

1. with the runner stopped (SIGSTOP, every thread of every process of it), the judge draws
   fresh values into every set (normal distribution, one secret seed per set and batch),
   poisons every output and the workspace with NaN and, on CUDA, flushes the L2 (a buffer of
   at least twice the L2 written) and waits for the device. No set is used twice in a batch,
   and each was last touched before the flush: every call reads its operands from memory, as
   the old per-launch flush had them;
2. it sends ``kernel.go``, reads ``time.perf_counter()``, continues the runner, and reads the
   clock again when the answer arrives; the runner has made its ``K`` calls (one CUDA graph
   replay where its launches could be captured, eager calls otherwise) and waited for its device;
3. it stops the runner and checks every output of the batch on rows chosen after the answer,
   against ``x[rows] @ w.T`` computed here from inputs drawn again from the set's seed; the
   guard rows, the workspace's guard tail and the inputs themselves are checked too. A wrong or
   unwritten row fails the candidate: an answer sent before the work finished shows as NaN.

``K`` makes a batch last about ``BATCH_TARGET_MS`` by cuBLAS's time measured here, capped by
:data:`ARENA_CAP`. The reference (kernel_role.cublas) is timed the same way, graph included, in
a runner of its own started after the candidate's has ended.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import functools
import math
import random
import time
from dataclasses import dataclass
from typing import Any

import torch

from codevolve.evaluator_workers.gpu.judging import BATCH_TARGET_MS, MAX_BATCH
from codevolve.evaluator_workers.gpu.remote import CandidateProblem, Remote
from codevolve.evaluator_workers.gpu.runner_link import RunnerGone
from codevolve.evaluator_workers.gpu.shared_tensors import Arena
from codevolve.problems.gemm_kernel_gpu.device.kernel_bench import (
    InputSet,
    Workspace,
    fill,
    poison,
    set_bytes,
    tolerance_problem,
    workspace_elements,
)
from codevolve.problems.gemm_tiling.gpu_timing import Shape

ARENA_CAP = {"cuda": 8 << 30, "cpu": 1 << 30}  # bytes of one shape's batch of input sets
CHECKED_ROWS = 4  # rows of every timed output compared with the judge's own product
FLUSH_MIN_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class Plan:
    """How one shape is timed: calls per batch, batches."""

    batch: int
    warmup: int
    trials: int


def batch_size(shape: Shape, reference_ms: float, device: str) -> int:
    """Calls per timed batch: about BATCH_TARGET_MS of cuBLAS, within the arena cap."""
    target = math.ceil(BATCH_TARGET_MS[device] / max(reference_ms, 1e-3))
    return max(1, min(MAX_BATCH[device], target, ARENA_CAP[device] // set_bytes(shape)))


def reference_ms(shape: Shape, device: str) -> float:
    """cuBLAS's time for one call of ``shape`` here, the fastest of three warm calls on the
    judge's own buffers (it sizes the batches)."""
    m, n, k = shape
    x = torch.randn((m, k), device=device).to(torch.bfloat16)
    w = torch.randn((n, k), device=device).to(torch.bfloat16)
    y = torch.empty((m, n), dtype=torch.bfloat16, device=device)
    best = math.inf
    torch.matmul(x, w.t(), out=y)
    for _ in range(3):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        torch.matmul(x, w.t(), out=y)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - started) * 1e3)
    return best


@functools.cache
def _flush_buffer() -> torch.Tensor:
    l2_bytes = int(torch.cuda.get_device_properties(0).L2_cache_size)
    return torch.empty(max(FLUSH_MIN_BYTES, 2 * l2_bytes) // 4, dtype=torch.int32, device="cuda")


def stop(remote: Remote) -> None:
    """Stop the runner, every process of it, and wait until each thread is seen stopped."""
    if remote.runner.alive():
        remote.runner.pause()


def ask_stopped(remote: Remote, message: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Continue the runner, ask, stop it again: its reply and the judge's seconds between the
    request and the answer (at most the remote's ``timeout_s``). A problem the candidate caused
    is :class:`CandidateProblem`."""
    runner = remote.runner
    runner.send(message)
    start = time.perf_counter()
    runner.resume()
    try:
        reply = runner.receive(remote.timeout_s)
    except RunnerGone as exc:
        raise CandidateProblem(f"the {remote.who} process failed: {exc}") from None
    finally:
        end = time.perf_counter()
        stop(remote)
    if "problem" in reply:
        raise CandidateProblem(str(reply["problem"])[:2000])
    return reply, end - start


class Batch:
    """One shape's ``K`` input sets and shared workspace, staged in the runner."""

    def __init__(self, sets: list[InputSet], workspace: Workspace, *, salt: int) -> None:
        self.sets = sets
        self.workspace = workspace
        self.seeds = [0] * len(sets)
        self.rng = random.Random(salt)  # seeds and checked rows: the judge's secret
        self.graph = False
        self.why = ""

    def stage(self, remote: Remote, num_sms: int) -> None:
        """Name the sets to the runner; on CUDA it compiles and captures them into a graph."""
        self.refill()
        message = {
            "op": "kernel.stage",
            "rounds": [s.specs for s in self.sets],
            "workspace": self.workspace.spec,
            "num_sms": num_sms,
            "graph": True,
        }
        reply, _ = ask_stopped(remote, message)
        self.graph, self.why = bool(reply.get("graph")), str(reply.get("why", ""))[:300]

    def refill(self) -> None:
        """Fresh values in every set, outputs and workspace poisoned (the runner is stopped)."""
        for index, inputs in enumerate(self.sets):
            self.seeds[index] = self.rng.getrandbits(62)
            fill(inputs.x, inputs.w, "normal", self.seeds[index])
            poison(inputs.guarded_y)
        poison(self.workspace.guarded)
        if self.sets[0].x.is_cuda:
            _flush_buffer().zero_()
            torch.cuda.synchronize()

    def run(self, remote: Remote) -> float:
        """One timed batch: milliseconds per call by the judge's clock."""
        reply, seconds = ask_stopped(remote, {"op": "kernel.go"})
        if reply.get("done") != len(self.sets):
            raise CandidateProblem(f"the {remote.who} process answered a batch without its calls")
        return seconds * 1e3 / len(self.sets)

    def problem(self) -> str:
        """What is wrong in the batch's outputs, checked on rows chosen now ("" if right)."""
        first = self.sets[0]
        x, w = torch.empty_like(first.x), torch.empty_like(first.w)
        m = x.shape[0]
        for index, inputs in enumerate(self.sets):
            fill(x, w, "normal", self.seeds[index])
            rows = torch.tensor(sorted(self.rng.sample(range(m), min(m, CHECKED_ROWS))))
            rows = rows.to(x.device)
            ref = x[rows].float() @ w.float().t()
            wrong = tolerance_problem(inputs.y[rows], ref) or inputs.guards_problem()
            if not wrong and not (torch.equal(inputs.x, x) and torch.equal(inputs.w, w)):
                wrong = "the launch changed its inputs"
            if wrong:
                return f"call {index + 1} of {len(self.sets)}: {wrong}"
        return self.workspace.guard_problem()


def time_shape(
    remote: Remote, arena: Arena, shape: Shape, plan: Plan, *, salt: int, num_sms: int, check: bool
) -> tuple[list[float], Batch]:
    """``plan``'s batches of ``shape`` in ``arena`` (reset first), staged in ``remote``'s
    runner: milliseconds per call of each timed batch, and the batch (whether a graph ran it);
    ``check``: every output checked (a candidate's), else not (cuBLAS's)."""
    arena.reset()
    sets = [InputSet.place(arena, shape) for _ in range(plan.batch)]
    workspace = Workspace.place(arena, workspace_elements(shape[0], shape[1], remote.device))
    batch = Batch(sets, workspace, salt=salt)
    batch.stage(remote, num_sms)
    return timed_batches(remote, batch, plan, check=check), batch


def timed_batches(remote: Remote, batch: Batch, plan: Plan, *, check: bool) -> list[float]:
    """Milliseconds per call of ``plan.trials`` batches after ``plan.warmup`` (the runner is
    stopped before and after)."""
    times = []
    for index in range(plan.warmup + plan.trials):
        batch.refill()
        per_call = batch.run(remote)
        if check:
            wrong = batch.problem()
            if wrong:
                raise CandidateProblem(f"timed batch {index + 1}, {wrong}")
        if index >= plan.warmup:
            times.append(per_call)
    return times
