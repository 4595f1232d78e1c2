"""Benchmark: what the sandbox costs per evaluation, and how long a gemm-tiling cascade takes.

For each isolation set-up (every layer this machine offers; without namespaces, as for a worker
that is not root; with no layer beyond rlimits) it prints the minimum (the best estimate on a
busy machine), median and 90th percentile of:

- ``call``: a sandboxed call of a trivial entry point (a fork, the cage, the round trip);
- ``call 88``: the gemm initial program's ``choose_config`` on the 88 shapes, sandboxed;
- ``overhead``: ``call 88`` minus the same 88 calls made in this process (the sandbox's share);
- ``CPU per call``: CPU time of the fork server and its children per trivial call (user +
  system), which a loaded machine inflates far less than wall time.

Then the gemm-tiling cascade (guard, static, probe, train) of the initial program, whole and per
stage, with every layer on.

    python bench/sandbox_overhead.py [--calls 200] [--cascades 30]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from codevolve.core.config import SandboxLimits
from codevolve.core.task import Task
from codevolve.evaluator_workers.cascade import run_cascade
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.problems.gemm_tiling.problem import gemm_tiling_problem
from codevolve.problems.gemm_tiling.shapes import all_shapes

LIMITS = SandboxLimits(wall_s=10.0, cpu_s=10.0, memory_mb=1024, output_bytes=65536)
SET_UPS: dict[str, tuple[str, ...]] = {
    "every layer": (),
    "no namespaces": ("unprivileged", "no_network", "private_ipc", "private_shm", "subreaper"),
    "rlimits only": (
        "unprivileged",
        "no_network",
        "private_ipc",
        "private_shm",
        "subreaper",
        "landlock",
        "seccomp",
    ),
}


def _timed(action: Callable[[], object], repeats: int) -> list[float]:
    """Milliseconds per run of ``action``, after two warm-up runs."""
    for _ in range(2):
        action()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _row(name: str, samples: Sequence[float]) -> str:
    p90 = statistics.quantiles(samples, n=10)[-1]
    return (
        f"  {name:<22} min {min(samples):7.2f} ms   median {statistics.median(samples):7.2f} ms"
        f"   p90 {p90:7.2f} ms"
    )


def _server_cpu_ms(pool: SandboxPool) -> float:
    """CPU milliseconds the pool's server and its reaped children have used so far."""
    (pid,) = pool.server_pids()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


def _in_process_ms(source: str, args: list[list[int]], repeats: int) -> float:
    namespace: dict[str, object] = {}
    exec(compile(source, "candidate.py", "exec"), namespace)  # trusted: the initial program
    choose = namespace["choose_config"]
    assert callable(choose)
    return statistics.median(_timed(lambda: [choose(*a) for a in args], repeats))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--cascades", type=int, default=30)
    args = parser.parse_args()

    problem = gemm_tiling_problem()
    source = problem.initial_program
    shape_args = [list(s.args) for s in all_shapes()]
    local_ms = _in_process_ms(source, shape_args, args.calls)
    trivial = "def f(x):\n    return x\n"
    for name, disabled in SET_UPS.items():
        with SandboxPool(size=1, disabled=disabled) as pool:
            print(f"{name}: {pool.isolation}")
            cpu_before = _server_cpu_ms(pool)
            call = _timed(functools.partial(pool.call, trivial, "f", [[1]], LIMITS), args.calls)
            cpu_ms = (_server_cpu_ms(pool) - cpu_before) / (args.calls + 2)
            call_88 = _timed(
                functools.partial(pool.call, source, "choose_config", shape_args, LIMITS),
                args.calls,
            )
            print(_row("call", call))
            print(_row("call 88", call_88))
            print(_row("overhead (call 88)", [ms - local_ms for ms in call_88]))
            print(f"  {'CPU per call':<22} {cpu_ms:7.2f} ms (server + child, user + system)")

    with SandboxPool(size=1) as pool:
        per_stage: dict[str, list[float]] = {}
        whole = []
        for seed in range(args.cascades):
            task = Task(
                program_id=f"bench-{seed}", job_id="bench", problem=problem.name,
                source=source, seed=seed, limits=LIMITS,
            )  # fmt: skip
            evaluation = run_cascade(problem, task, pool, worker="bench")
            assert evaluation.score == 1.0, evaluation
            whole.append(evaluation.duration_s * 1000)
            for result in evaluation.stages:
                per_stage.setdefault(result.stage, []).append(result.duration_s * 1000)
    print(f"gemm-tiling cascade of the initial program, {args.cascades} evaluations:")
    print(_row("whole cascade", whole))
    for name, samples in per_stage.items():
        print(_row(f"stage {name}", samples))


if __name__ == "__main__":
    main()
