"""What gemm-kernel-gpu judging through caged runners measures and costs, per shape, on a GPU.

    python bench/kernel_boundary_cost.py [--samples S] [--variant NAME] [--shapes decode|all]

Judges the problem's initial program (or one of its variants) through ``kernel_jobs.measure_job``,
the device job's own entry, one shape per judging after a warm-up judging, and prints for each
shape: the candidate's and cuBLAS's median microseconds per call, their ratio (cuBLAS / candidate,
the score's term), the calls per timed batch (K), whether a CUDA graph replayed them, and the wall
seconds of the judging (runner start, load, compile, checks, timing, cuBLAS's runner). Shapes:
decode M = 1, 4, 16 and prefill M = 4096 on N = K = 4096 and 8192. To compare with the old
in-process harness (per-launch L2 flush, CUDA events), run bench/gpu_kernel.py of commit 0b246e1
on the same machine (``git worktree add /tmp/old 0b246e1``).
"""

from __future__ import annotations

import argparse
import time

DECODE = [(m, n, n) for n in (4096, 8192) for m in (1, 4, 16)]
PREFILL = [(4096, n, n) for n in (4096, 8192)]


def program(variant: str | None) -> str:
    from codevolve.problems.gemm_kernel_gpu.kernel_source import initial_program

    if variant is None:
        return initial_program()
    from codevolve.problems.gemm_kernel_gpu.kernel_source import VARIANTS, add_rule, apply_hunks

    source = initial_program()
    hunks = add_rule(source, "True", VARIANTS[variant], (64, 128, 64, 4, 4, 8))
    if hunks is None:
        raise SystemExit(f"cannot add {variant}")
    return apply_hunks(source, hunks)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=10, help="timed batches per shape")
    parser.add_argument("--variant", default=None)
    parser.add_argument("--shapes", choices=("decode", "all"), default="all")
    args = parser.parse_args()

    from codevolve.problems.gemm_kernel_gpu.device import kernel_jobs

    source = program(args.variant)
    shapes = DECODE + (PREFILL if args.shapes == "all" else [])
    kernel_jobs.measure_job({"source": source, "shapes": [[16, 4096, 4096]], "samples": 3})
    print(f"{'shape':>18} {'cand us':>9} {'cuBLAS us':>9} {'ratio':>6} {'K':>5} graph  wall s")
    try:
        for shape in shapes:
            started = time.perf_counter()
            reply = kernel_jobs.measure_job(
                {"source": source, "shapes": [list(shape)], "samples": args.samples}
            )
            wall = time.perf_counter() - started
            if reply["load_error"] or any(reply["problems"]):
                print(f"{shape!s:>18} failed: {reply['load_error'] or reply['problems'][-1]}")
                continue
            row = reply["timings"][0]
            if row["status"] != "ok":
                print(f"{shape!s:>18} {row['status']}: {row['detail']}")
                continue
            ratio = row["cublas_us"] / row["t_us"]
            print(
                f"{shape!s:>18} {row['t_us']:9.1f} {row['cublas_us']:9.1f} {ratio:6.3f} "
                f"{row['batch']:5d} {'yes' if row['graph'] else 'no ':>5} {wall:7.1f}"
            )
            seconds = reply["seconds"]
            print(" " * 19 + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()))
    finally:
        kernel_jobs.shutdown()


if __name__ == "__main__":
    main()
