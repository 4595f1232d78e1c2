"""gemm-kernel-gpu's GPU evaluations per minute through the device's pipeline.

    PYTHONPATH=src python bench/gpu_kernel_pipeline.py [--children 40] [--loops 16] [--gpus 0|cpu]

Children are evaluated as a GPU worker evaluates them: the problem's two GPU stages (``gpu_probe``
then, past its threshold, ``gpu``: ``GpuKernelStage.run_on``) on one device process serving
``kernel.measure``, ``--loops`` children at once (a worker's loops sharing its device), each
given the timings a launch store of this run holds for its launches (as the controller attaches
them; every passing stage adds its fresh ones). Three phases, each timed on the wall clock:

1. the initial program alone: every launch new (it fills the store);
2. **new launches**: children of the initial program with one dispatch rule added (a variant's
   kernels, or a tile config of one, for a regime): their new launches compiled in the compile
   lane and timed in the timing lane, the other shapes answered by the store;
3. **dispatch-only**: children of phase 2's passing ones whose rule's M bound was tightened, so
   every launch they take was timed before: answered by the store, no ``kernel.measure``.

Every child runs both stages unless ``--gate`` (then a probe under 90 % of the initial
program's ends it there, as in a search, which makes the figure higher).

Prints one JSON object: per phase the children, the wall seconds, evaluations per minute and the
median seconds of an evaluation, of its stages and of its compile lane (``compile_s``, from the
stage's artifacts). ``--gpus cpu`` runs the same on the CPU (a device process that sees no GPU):
small shapes, children whose launcher is a torch product (Triton's interpreter is far too slow
for real shapes), compile runners compiling for an sm_90 GPU; it only shows the script runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from codevolve.core.launch_store import LaunchKey, StoredTiming
from codevolve.evaluator_workers.gpu.device_process import DeviceProcess
from codevolve.problems.gemm_kernel_gpu.kernel_source import (
    VARIANTS,
    add_rule,
    apply_hunks,
    initial_program,
)
from codevolve.problems.gemm_kernel_gpu.launches import launch_keys
from codevolve.problems.gemm_kernel_gpu.stages import (
    PROBE_KEEP,
    GpuKernelStage,
    full_stage,
    probe_stage,
)
from codevolve.problems.gemm_tiling.shapes import GemmShape

MEASURE = {"kernel.measure": "codevolve.problems.gemm_kernel_gpu.device.kernel_jobs:measure_job"}
CPU_ENV = {
    "TRITON_INTERPRET": "1",
    "CODEVOLVE_KB_DEVICE": "cpu",
    "CODEVOLVE_KERNEL_COMPILE_TARGET": "cuda:90",
}
# (the rule's test, the test a dispatch-only child tightens it to, variant, parameter choices):
# rules over a regime and over part of one, as the simulated proposer's moves write them
RULES: tuple[tuple[str, str, str, tuple[tuple[int, ...], ...]], ...] = (
    ("M <= 16", "M <= 8", "split_k", tuple(
        (16, bn, 128, 4, s, k) for bn in (64, 128) for s in (3, 4, 5) for k in (2, 4, 8)
    )),
    ("M <= 16 and N >= 8192", "M <= 8 and N >= 8192", "plain", tuple(
        (16, bn, bk, 4, s, 1) for bn in (32, 64, 128) for bk in (64, 128) for s in (3, 4, 5)
    )),
    ("M > 16 and M <= 512", "M > 32 and M <= 512", "tma", tuple(
        (bm, bn, 64, 4, s, 8) for bm in (64, 128) for bn in (64, 128) for s in (3, 4, 5)
    )),
    ("M > 128 and M <= 512", "M > 192 and M <= 512", "plain", tuple(
        (64, bn, 64, w, s, 8) for bn in (64, 128) for w in (4, 8) for s in (3, 4, 5)
    )),
    ("M >= 1024", "M >= 2048", "tma_persistent", tuple(
        (128, 128, 64, w, s, 8, f) for w in (4, 8) for s in (3, 4, 5) for f in (0, 1)
    )),
    ("M >= 1024 and N <= 8192", "M >= 2048 and N <= 8192", "persistent", tuple(
        (128, 128, 64, w, s, 8) for w in (4, 8) for s in (3, 4, 5)
    )),
)  # fmt: skip
TORCH_PROGRAM = """
def launch_torch(x, w, y, workspace, num_sms, variant):
    y.copy_(x.float() @ w.float().t())


def matmul(x, w, y, workspace, num_sms):
    M, K = x.shape
    N = w.shape[0]
    if M <= BOUND:
        return launch_torch(x, w, y, workspace, num_sms, VARIANT)
    return launch_torch(x, w, y, workspace, num_sms, 0)
"""
CPU_SHAPES = tuple(GemmShape(m, n, k) for m, n, k in ((4, 32, 64), (8, 64, 32), (32, 64, 64)))


@dataclasses.dataclass
class Child:
    """A program as a GPU stage sees it: its source and the store's timings for it."""

    source: str
    tighter: str = ""  # its dispatch-only child's source, where it has one
    stored_timings: tuple[StoredTiming, ...] = ()
    remeasure: int = 0

    def call(self, entry: str, args: Sequence[Any]) -> Any:
        raise NotImplementedError("GPU stages never call the sandbox")

    call_harness = call


class Store:
    """The launch store of this run: the latest timing per key (thread-safe)."""

    def __init__(self, stages: Sequence[GpuKernelStage]) -> None:
        self.shapes = sorted({s for stage in stages for s in stage.judged_shapes()})
        self._held: dict[LaunchKey, StoredTiming] = {}
        self._lock = threading.Lock()

    def attach(self, child: Child) -> Child:
        keys = launch_keys(child.source, self.shapes) or {}
        with self._lock:
            held = tuple(self._held[k] for k in set(keys.values()) if k in self._held)
        return dataclasses.replace(child, stored_timings=held)

    def add(self, timings: Sequence[StoredTiming]) -> None:
        with self._lock:
            self._held.update((t.key, t) for t in timings)


def evaluate(
    child: Child,
    stages: Sequence[GpuKernelStage],
    device: DeviceProcess,
    store: Store,
    rng: Any,
    parent_probe: float | None,
) -> dict[str, Any]:
    """The child's GPU stages as the cascade runs them; what each took. With ``parent_probe``,
    a probe below its threshold against it ends the cascade there (else every stage runs)."""
    child = store.attach(child)
    record: dict[str, Any] = {"stages": {}, "passed": False}
    started = time.perf_counter()
    for stage in stages:
        began = time.perf_counter()
        result = stage.run_on(child, device, rng)
        record["stages"][stage.name] = {
            "s": time.perf_counter() - began,
            "passed": result.passed,
            "score": result.score,
            "from_store": result.artifacts.get("from_store"),
            "compile_s": result.artifacts.get("compile_s"),
            "error": (result.error or "")[:200],
        }
        store.add(result.launch_timings)
        if not result.passed:
            break
        threshold = stage.threshold
        if threshold is not None and parent_probe is not None and stage.name == "gpu_probe":
            kept = threshold.passes(result.score, parent_probe)
        else:
            kept = True
        if not kept:
            record["rejected"] = stage.name
            break
        if stage.name == "gpu_probe":
            record["probe_score"] = result.score
    else:
        record["passed"] = True
    record["s"] = time.perf_counter() - started
    return record


def run_phase(
    children: Sequence[Child],
    stages: Sequence[GpuKernelStage],
    device: DeviceProcess,
    store: Store,
    *,
    loops: int,
    parent_probe: float | None,
) -> tuple[dict[str, Any], list[tuple[Child, dict[str, Any]]]]:
    """``children`` evaluated by ``loops`` threads; the phase's figures and each record."""
    queue = list(enumerate(children))
    done: list[tuple[int, Child, dict[str, Any]]] = []
    lock = threading.Lock()

    def loop(index: int) -> None:
        rng = np.random.default_rng(index)
        while True:
            with lock:
                if not queue:
                    return
                number, child = queue.pop(0)
            record = evaluate(child, stages, device, store, rng, parent_probe)
            with lock:
                done.append((number, child, record))

    started = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(i,)) for i in range(loops)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    records = [(child, record) for _, child, record in sorted(done, key=lambda item: item[0])]
    return summary(records, wall), records


def summary(records: Sequence[tuple[Child, dict[str, Any]]], wall: float) -> dict[str, Any]:
    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 3) if values else None

    def of_stage(name: str) -> dict[str, Any]:
        ran = [r["stages"][name] for _, r in records if name in r["stages"]]
        compiled = [float(s["compile_s"]) for s in ran if s["compile_s"]]
        return {
            "evaluations": len(ran),
            "median_new_shapes": median([float(_new_shapes(s)) for s in ran]),
            "median_s": median([s["s"] for s in ran]),
            "median_compile_s": median(compiled),
            "device_jobs": len(compiled),  # the others were answered by the store alone
            "from_store": sorted({str(s["from_store"]) for s in ran})[:8],
        }

    names = sorted({name for _, r in records for name in r["stages"]})
    new = sum(_new_shapes(s) for _, r in records for s in r["stages"].values())
    errors = {s["error"] for _, r in records for s in r["stages"].values() if s["error"]}
    return {
        "children": len(records),
        "passed": sum(1 for _, r in records if r["passed"]),
        "rejected_by_the_probe": sum(1 for _, r in records if r.get("rejected")),
        "wall_s": round(wall, 2),
        "evaluations_per_min": round(60 * len(records) / wall, 1) if wall > 0 else None,
        "median_evaluation_s": median([r["s"] for _, r in records]),
        # timed shapes the store did not hold (each checked and timed on the device), and the
        # wall seconds per one of them: the device's cost of a shape while the lane is full
        "new_shapes": new,
        "wall_s_per_new_shape": round(wall / new, 3) if new else None,
        "stages": {name: of_stage(name) for name in names},
        "errors": sorted(errors)[:5],
    }


def _new_shapes(stage: dict[str, Any]) -> int:
    """Timed shapes of a stage that the store did not answer (from its ``from_store`` a/b)."""
    held, _, judged = str(stage.get("from_store") or "").partition("/")
    return int(judged) - int(held) if held.isdigit() and judged.isdigit() else 0


def gpu_children(count: int, seed: int) -> list[Child]:
    """Children of the initial program with one rule each, no two alike."""
    rng = np.random.default_rng(seed)
    base = initial_program()
    choices = [(test, tighter, v, p) for test, tighter, v, params in RULES for p in params]
    children = []
    for index in rng.permutation(len(choices))[:count]:
        test, tighter, variant, params = choices[int(index)]
        hunks = add_rule(base, test, VARIANTS[variant], params)
        if hunks is None:
            continue
        source = apply_hunks(base, hunks)
        children.append(Child(source, tighter=source.replace(f"if {test}:", f"if {tighter}:", 1)))
    return children


def cpu_children(count: int) -> list[Child]:
    children = []
    for index in range(count):
        bound, variant = (4, 8, 16)[index % 3], index + 1
        source = TORCH_PROGRAM.replace("BOUND", str(bound)).replace("VARIANT", str(variant))
        tighter = source.replace(f"M <= {bound}:", f"M <= {bound - 1}:")
        children.append(Child(source, tighter=tighter))
    return children


def cpu_stages() -> list[GpuKernelStage]:
    probe = GpuKernelStage(
        "gpu_probe", shapes=CPU_SHAPES[:2], check_shapes=((5, 17, 33),), threshold=PROBE_KEEP,
        samples=3,
    )  # fmt: skip
    return [probe, GpuKernelStage("gpu", shapes=CPU_SHAPES, samples=3)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=40, help="children per phase")
    parser.add_argument("--loops", type=int, default=16, help="evaluations in flight at once")
    parser.add_argument("--gpus", default="0", help="the GPU's id, or cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument(
        "--gate",
        action="store_true",
        help="end a child at the probe when it keeps under 90%% of the initial program's probe "
        "score, as a search does (by default every child runs both stages: the dearer case)",
    )
    args = parser.parse_args()

    on_cpu = args.gpus == "cpu"
    stages = cpu_stages() if on_cpu else [probe_stage(), full_stage()]
    if on_cpu:
        initial = TORCH_PROGRAM.replace("BOUND", "0").replace("VARIANT", "0")
        children = cpu_children(args.children)
        device = DeviceProcess(None, jobs=MEASURE, env=CPU_ENV)
    else:
        initial, children = initial_program(), gpu_children(args.children, args.seed)
        device = DeviceProcess(args.gpus, jobs=MEASURE)
    store = Store(stages)
    report: dict[str, Any] = {"device": "cpu" if on_cpu else f"gpu {args.gpus}"}
    with device:
        first, records = run_phase(
            [Child(initial)], stages, device, store, loops=1, parent_probe=None
        )
        report["initial"] = first
        parent_probe = records[0][1].get("probe_score") if args.gate else None
        report["new_launches"], records = run_phase(
            children, stages, device, store, loops=args.loops, parent_probe=parent_probe
        )
        dispatch_only = [Child(c.tighter) for c, r in records if r["passed"] and c.tighter]
        report["dispatch_only"], _ = run_phase(
            dispatch_only, stages, device, store, loops=args.loops, parent_probe=parent_probe
        )
        info = device.run("info", None, timeout_s=60)
        report["device_info"] = info.value if info.ok else info.error
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
