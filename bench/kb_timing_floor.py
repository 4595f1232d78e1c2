"""The judge's timing floor on a GPU: how small a kernel the cross-process clock still times
within 5 % of an in-process CUDA-event timing.

    python bench/kb_timing_floor.py [--trials 20]

For ReLU on n float32 elements (n from 2^12 to 2^26) it judges a candidate that is the reference
itself (``kb_jobs.judge_job``: the candidate in its runner, the reference in another, the
judge's clock), and times the same ReLU in this process with CUDA events: the batch size the
the judge chose, each call on its own input, after the same L2 flush, median over the same number of
batches. It prints both per-call medians, their ratio and the batch size; the floor is the
smallest n from which every ratio stays within 5 %. Quoted by docs/security.md.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from codevolve.evaluator_workers.gpu import kb_jobs


def reference(n: int) -> str:
    return (
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x)\n\n"
        f"def get_inputs():\n    return [torch.rand({n})]\n\n"
        "def get_init_inputs():\n    return []\n"
    )


def in_process_ms(n: int, batch: int, trials: int) -> float:
    inputs = [torch.rand(n, device="cuda") for _ in range(batch)]
    flush = torch.empty(256 << 18, dtype=torch.int32, device="cuda")
    times = []
    for _ in range(trials + 2):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for x in inputs:
            torch.relu(x)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / batch)
    return statistics.median(times[2:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    columns = (
        "n",
        "batch",
        "judge cand ms",
        "judge eager ms",
        "in-process ms",
        "cand/in",
        "eager/in",
    )
    print(" ".join(f"{c:>14}" for c in columns))
    for power in range(12, 27, 2):
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
        ours = in_process_ms(n, timing["batch"], args.trials)
        cand, eager = timing["candidate_ms"], timing["eager_ms"]
        row = (n, timing["batch"], f"{cand:.4f}", f"{eager:.4f}", f"{ours:.4f}")
        print(" ".join(f"{v:>14}" for v in (*row, f"{cand / ours:.3f}", f"{eager / ours:.3f}")))
    kb_jobs.shutdown()


if __name__ == "__main__":
    main()
