"""The judge's timing floor on a GPU: how small a kernel the cross-process clock still times
within 5 % of an in-process CUDA-event timing.

    python bench/kb_timing_floor.py [--trials 20]

For ReLU on n float32 elements (n from 2^12 to 2^26) it judges a candidate that is the reference
itself (``kb_jobs.judge_job``: the candidate in its runner, the reference in another, the
judge's clock), then times the same batch in this process (the batch size the judge chose, each
call on its own input, after the same L2 flush, median over the same number of batches) four
ways: CUDA events around bare ``torch.relu`` calls, CUDA events around calls of an ``nn.Module``
(the per-call Python a KernelBench program pays), the host clock around that batch and a
synchronisation, and the host clock around the runner role's own timed step run here (what the
runner does inside the judge's window, without the process boundary). It prints the per-call
medians and the judge's ratio to each; the floor is the smallest n from which every ratio stays
within 5 %. Quoted by docs/security.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from codevolve.evaluator_workers.gpu.runner_role import RoleContext
from codevolve.evaluator_workers.gpu.shared_tensors import ALIGN, Arena
from codevolve.problems.kernelbench.device import kb_jobs
from codevolve.problems.kernelbench.device.kb_role import ModelRole


def reference(n: int) -> str:
    return (
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x)\n\n"
        f"def get_inputs():\n    return [torch.rand({n})]\n\n"
        "def get_init_inputs():\n    return []\n"
    )


def in_process_ms(n: int, batch: int, trials: int) -> tuple[float, float, float]:
    """Per-call medians in this process over ``trials`` batches of ``batch`` calls, each on its
    own input after an L2 flush: CUDA events around bare ``torch.relu`` calls, CUDA events around
    calls of the reference ``Model`` (nn.Module call, outputs kept until the batch ends, as the
    runner keeps them), and the host clock around the same Model batch and a synchronisation."""
    inputs = [torch.rand(n, device="cuda") for _ in range(batch)]
    flush = torch.empty(256 << 18, dtype=torch.int32, device="cuda")
    model = torch.nn.ReLU()
    bare, called, host = [], [], []
    for _ in range(trials + 2):
        for calls, into in ((lambda x: torch.relu(x), bare), (model, called)):
            flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            mark = time.perf_counter()
            start.record()
            kept = [calls(x) for x in inputs]
            end.record()
            torch.cuda.synchronize()
            seconds = time.perf_counter() - mark
            into.append(start.elapsed_time(end) / batch)
            if into is called:
                host.append(seconds * 1e3 / batch)
            del kept
    return tuple(statistics.median(t[2:]) for t in (bare, called, host))  # type: ignore[return-value]


def in_role_ms(n: int, batch: int, trials: int, *, arena: bool = False) -> float:
    """Per-call median of the runner's own timed step, run in this process: the role's ``go``
    (the calls, the device synchronisation and the outputs' description) around the same batch,
    host clock. The judge's figure minus this one is what the process boundary costs (a signal,
    two messages, the judge's wake-up). ``arena``: the inputs in a judge's arena (driver-allocated
    memory, as the runner reads them) rather than torch's allocator."""
    context = RoleContext(arena=None, device="cuda", scratch="/tmp", rules=True)
    role = ModelRole(torch.nn.ReLU, context, trusted=True)
    role.model = torch.nn.ReLU()
    inputs = [torch.rand(n, device="cuda") for _ in range(batch)]
    if arena:
        held = Arena.create(batch * (n * 4 + ALIGN), "cuda")
        placed = [held.place(x)[0] for x in inputs]
        for slot, x in zip(placed, inputs, strict=True):
            slot.copy_(x)
        inputs = placed
    role.staged = [([x], []) for x in inputs]
    flush = torch.empty(256 << 18, dtype=torch.int32, device="cuda")
    times = []
    for _ in range(trials + 2):
        flush.zero_()
        torch.cuda.synchronize()
        mark = time.perf_counter()
        role.go({})
        times.append((time.perf_counter() - mark) * 1e3 / batch)
        role.kept = []
    if arena:
        role.staged, inputs, placed = [], [], []
        held.close()  # the driver's allocation, gigabytes at the largest sizes
    return statistics.median(times[2:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--powers", default="12-26", help="n = 2**p for p in this range, step 2")
    args = parser.parse_args()
    columns = ("n", "batch", "judge cand", "judge eager", "in relu", "in Model", "in host",
               "in role", "in arena", "cand/relu", "cand/Model", "cand/host",
               "cand/role")  # fmt: skip
    print(" ".join(f"{c:>11}" for c in columns))
    low, high = (int(p) for p in args.powers.split("-"))
    for power in range(low, high + 1, 2):
        n = 1 << power
        ref = reference(n)
        candidate = ref.replace("class Model(", "class ModelNew(").split("def get_inputs")[0]
        reply = kb_jobs.judge_job(
            {
                "reference": ref,
                "candidate": candidate,
                "trials": args.trials,
                "warmup": 3,
                "distributions": ["kernelbench"],
            }
        )
        timing = reply["timing"]
        assert reply["correct"] and timing, reply
        relu, called, host = in_process_ms(n, timing["batch"], args.trials)
        role = in_role_ms(n, timing["batch"], args.trials)
        in_arena = in_role_ms(n, timing["batch"], args.trials, arena=True)
        cand, eager = timing["candidate_ms"], timing["eager_ms"]
        figures = (cand, eager, relu, called, host, role, in_arena)
        row = [n, timing["batch"], *(f"{v:.4f}" for v in figures)]
        row += [f"{cand / v:.3f}" for v in (relu, called, host, role)]
        print(" ".join(f"{v:>11}" for v in row), flush=True)
    kb_jobs.shutdown()


if __name__ == "__main__":
    main()
