"""Wall time per judged KernelBench candidate, on the CPU or a GPU.

    python bench/kb_judge_cost.py [--device cpu|cuda] [--candidates N] [--trials T]

Judges N candidates (a right one and a wrong one in turn) of three small reference problems
through ``kb_jobs.judge_job``, the device job's own entry, after one warm-up judging each, and
prints the median and mean seconds per candidate, timed and untimed. It runs against whatever
``codevolve`` is importable, so the same command measures two trees (PYTHONPATH=other/src).
Quoted by docs/results-kernelbench.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

PROBLEMS = {
    "relu": ("torch.relu(x)", "[torch.rand(256, 4096)]"),
    "cumsum": ("torch.cumsum(x, dim=1)", "[torch.rand(128, 4000)]"),
    "softmax": ("torch.softmax(x, dim=-1)", "[torch.rand(64, 8192)]"),
}


def files(forward: str, inputs: str) -> tuple[str, str, str]:
    head = "import torch\nimport torch.nn as nn\n\n"
    reference = (
        f"{head}class Model(nn.Module):\n    def forward(self, x):\n        return {forward}\n\n"
        f"def get_inputs():\n    return {inputs}\n\ndef get_init_inputs():\n    return []\n"
    )
    right = (
        f"{head}class ModelNew(nn.Module):\n    def forward(self, x):\n        return {forward}\n"
    )
    wrong = f"{head}class ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 0\n"
    return reference, right, wrong


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--candidates", type=int, default=12)
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["CODEVOLVE_KB_DEVICE"] = "cpu"
    try:
        from codevolve.problems.kernelbench.device import kb_jobs
    except ImportError:  # a tree from before the judges moved into their problems
        from codevolve.evaluator_workers.gpu import kb_jobs  # type: ignore[no-redef]

    for timed in (False, True):
        seconds = []
        for index in range(args.candidates + len(PROBLEMS)):
            name = list(PROBLEMS)[index % len(PROBLEMS)]
            reference, right, wrong = files(*PROBLEMS[name])
            candidate = right if (index // len(PROBLEMS)) % 2 == 0 else wrong
            payload = {"reference": reference, "candidate": candidate, "time": timed,
                       "trials": args.trials, "warmup": 2}  # fmt: skip
            start = time.perf_counter()
            reply = kb_jobs.judge_job(payload)
            if index >= len(PROBLEMS):  # the first of each problem warms caches
                seconds.append(time.perf_counter() - start)
            assert reply["correct"] == (candidate == right), (
                name,
                reply["problem"],
                reply["verdicts"],
            )
        median, mean = statistics.median(seconds), statistics.mean(seconds)
        print(
            f"{args.device} timed={timed}: {len(seconds)} candidates, median {median:.3f} s, "
            f"mean {mean:.3f} s per candidate"
        )
    getattr(kb_jobs, "shutdown", lambda: None)()  # older trees had none


if __name__ == "__main__":
    main()
