"""GPU calibration, the measured oracle, model fidelity and program evaluation on a real GPU.

    python bench/gpu_calibrate.py hardware [--out hw.json]
        bf16 matmul peak (cuBLAS, 8192^3), device-to-device copy bandwidth, the time of an empty
        Triton kernel under the timing protocol (launch overhead), L2 size, SMs, clocks; next to
        the cost model's constants.
    python bench/gpu_calibrate.py oracle --out oracle.json [--samples 7] [--workers 14]
        per-shape autotuning over the candidate set (problems/gemm_tiling_gpu/oracle.py) on all
        88 shapes: compile in parallel, check and time every candidate, re-time the 3 fastest per
        shape with 30 samples; stores the table with the GPU name and the method.
    python bench/gpu_calibrate.py fidelity --oracle oracle.json
        the cost model against the measurements (no GPU needed): per-shape Spearman rank
        correlation of model and measured times over the measured candidates, and the regret
        t(model's best config) / t(measured best).
    python bench/gpu_calibrate.py evaluate --oracle oracle.json PROGRAM.py ... [--samples 30]
        each program (run in the sandbox) on all 88 shapes, with the expert and the oracle's
        configs re-measured in the same session: geomean ratios vs expert, vs oracle, vs cuBLAS
        per split and regime, worst shape.

Every figure in docs/results-gpu.md comes from one of these commands.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from codevolve.problems.gemm_tiling import cost_model
from codevolve.problems.gemm_tiling.baselines import expert_config, geomean, shape_times
from codevolve.problems.gemm_tiling.shapes import GemmShape, all_shapes, heldout_shapes
from codevolve.problems.gemm_tiling.space import GemmConfig, config_index
from codevolve.problems.gemm_tiling_gpu.oracle import (
    REFINE_TOP,
    candidate_configs,
    inductor_configs,
    model_top_configs,
    neighbours,
    parse_oracle,
    tutorial_configs,
)

RETIME_TOP = 3
RETIME_SAMPLES = 30
REGIMES = ("decode", "mid", "prefill")


# ------------------------------------------------------------------------------------- hardware


def hardware() -> dict[str, Any]:
    import torch
    import triton

    from codevolve.problems.gemm_tiling_gpu.device.gemm_bench import GemmBench, device_info

    @triton.jit  # type: ignore[untyped-decorator]
    def _empty(x_ptr):  # type: ignore[no-untyped-def]
        pass

    def median_ms(fn: Any, reps: int, flush: Any = None) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(reps):
            if flush is not None:
                flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return float(np.median(times))

    n = 8192
    a = torch.randn((n, n), device="cuda").to(torch.bfloat16)
    b = torch.randn((n, n), device="cuda").to(torch.bfloat16)
    matmul_ms = median_ms(lambda: torch.matmul(a, b), 20)
    src = torch.randn(2**30 // 2, device="cuda").to(torch.bfloat16)  # 1 GiB
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src), 20)
    bench = GemmBench()
    flush = bench._flush  # the protocol's own flush buffer
    x = torch.empty(16, device="cuda")
    empty_us = 1e3 * median_ms(lambda: _empty[(1,)](x), 50, flush=flush)
    empty_hot_us = 1e3 * median_ms(lambda: _empty[(1,)](x), 50)
    info = device_info()
    return {
        "device": info,
        "bf16_matmul_tflops": 2 * n**3 / (matmul_ms * 1e-3) / 1e12,
        "copy_gbytes_per_s": 2 * src.numel() * 2 / (copy_ms * 1e-3) / 1e9,  # read + write
        "empty_kernel_us_after_flush": empty_us,
        "empty_kernel_us_back_to_back": empty_hot_us,
        "l2_bytes": info["l2_bytes"],
        "model": {
            "peak_tflops": cost_model.PEAK_FLOPS / 1e12,
            "hbm_gbytes_per_s": cost_model.HBM_BYTES_PER_S * cost_model.HBM_EFFICIENCY / 1e9,
            "launch_us": cost_model.LAUNCH_S * 1e6,
            "l2_reuse_bytes": cost_model.L2_REUSE_BYTES,
        },
        "clocks": _smi(),
    }


def _smi() -> str:
    query = "name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu"
    try:
        return subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi failed: {exc}"


# --------------------------------------------------------------------------------------- oracle


def _pairs(shapes_configs: Iterable[tuple[GemmShape, GemmConfig]]) -> list[Any]:
    return [((s.m, s.n, s.k), c.as_tuple()) for s, c in shapes_configs]


def oracle(samples: int, workers: int, out: Path) -> dict[str, Any]:
    """The sweep; ``out`` is rewritten after every shape (``"complete": false`` until the end),
    so a sweep cut short by a time limit keeps what it measured."""
    from codevolve.problems.gemm_tiling_gpu.device.gemm_bench import GemmBench
    from codevolve.problems.gemm_tiling_gpu.device.gemm_jobs import precompile

    shapes = all_shapes()
    candidates = {s: candidate_configs(s) for s in shapes}
    distinct = sorted({c.as_tuple() for cs in candidates.values() for c in cs})
    started = time.perf_counter()
    errors = precompile(distinct, workers=workers)
    compile_s = time.perf_counter() - started
    print(
        f"compiled {len(distinct)} configs in {compile_s:.0f} s, {len(errors)} failed", flush=True
    )
    bench = GemmBench(compile_workers=workers)
    rows = []
    started = time.perf_counter()
    for number, shape in enumerate(shapes):
        configs = list(candidates[shape])
        timings = bench.measure(
            _pairs((shape, c) for c in configs), seed=number, samples=samples, check=True
        )
        # Second round: the neighbours of the fastest few, measured on the same inputs' seed.
        ranked = sorted(
            (c for c, t in zip(configs, timings, strict=True) if t.status == "ok"),
            key=lambda c: timings[configs.index(c)].t_us,
        )
        extra = [n for c in ranked[:REFINE_TOP] for n in neighbours(c) if n not in set(configs)]
        extra = list(dict.fromkeys(extra))
        timings += bench.measure(
            _pairs((shape, c) for c in extra), seed=number, samples=samples, check=True
        )
        configs += extra
        measured = [(c, t) for c, t in zip(configs, timings, strict=True) if t.status == "ok"]
        measured.sort(key=lambda ct: ct[1].t_us)
        top = [c for c, _ in measured[:RETIME_TOP]]
        retimed = bench.measure(
            _pairs((shape, c) for c in top),
            seed=10_000 + number,
            samples=RETIME_SAMPLES,
            check=False,
            use_cache=False,
        )
        best_index = min(range(len(top)), key=lambda i: retimed[i].t_us)
        first = {c: t.t_us for c, t in measured}
        expert = expert_config(shape.m, shape.n, shape.k)
        rows.append(
            {
                "m": shape.m,
                "n": shape.n,
                "k": shape.k,
                "projection": shape.projection,
                "config": list(top[best_index].as_tuple()),
                "time_us": retimed[best_index].t_us,
                "cublas_us": retimed[best_index].cublas_us,
                "expert_us": first.get(expert, math.inf),
                "tutorial_us": min(
                    (first.get(c, math.inf) for c in tutorial_configs()), default=math.inf
                ),
                "inductor_us": min(
                    (first.get(c, math.inf) for c in inductor_configs(shape)), default=math.inf
                ),
                "measured": [[list(c.as_tuple()), t.t_us] for c, t in measured],
                "failed": {
                    ",".join(map(str, c.as_tuple())): f"{t.status}: {t.detail}"
                    for c, t in zip(configs, timings, strict=True)
                    if t.status != "ok"
                },
            }
        )
        print(
            f"{shape.projection:>16} M={shape.m:<5} best {top[best_index]} "
            f"{retimed[best_index].t_us:9.1f} us  cuBLAS {retimed[best_index].cublas_us:9.1f} us  "
            f"({len(measured)}/{len(configs)} ok, {len(extra)} neighbours)",
            flush=True,
        )
        partial = _oracle_table(rows, samples, len(distinct), compile_s, errors, started)
        out.write_text(json.dumps({**partial, "complete": False}, indent=1) + "\n")
    return {
        **_oracle_table(rows, samples, len(distinct), compile_s, errors, started),
        "complete": True,
    }


def _oracle_table(
    rows: list[dict[str, Any]],
    samples: int,
    distinct: int,
    compile_s: float,
    errors: dict[Any, str],
    started: float,
) -> dict[str, Any]:
    from codevolve.problems.gemm_tiling_gpu.device.gemm_bench import device_info

    shapes = all_shapes()
    return {
        "gpu": str(device_info()["name"]),
        "device": device_info(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "method": (
            f"per-shape autotune over {distinct} distinct configs (per shape: the cost "
            f"model's top {len(model_top_configs(shapes[0]))}, the Triton tutorial's 11 "
            "bf16-launchable configs, PyTorch inductor's mm_configs scaled to the shape, the "
            "expert's; then the launchable one-step neighbours of the "
            f"{REFINE_TOP} fastest); each checked (3 input distributions, NaN-prefilled guarded "
            "output) and "
            f"timed with {samples} samples (cold L2, CUDA events, cuBLAS alternating); the "
            f"{RETIME_TOP} fastest re-timed with {RETIME_SAMPLES} samples on fresh inputs; "
            "times are medians in microseconds"
        ),
        "measured_configs": len({tuple(c) for r in rows for c, _ in r["measured"]}),
        "compile_s": compile_s,
        "measure_s": time.perf_counter() - started,
        "compile_failures": {",".join(map(str, c)): e for c, e in errors.items()},
        "shapes": rows,
    }


# ------------------------------------------------------------------------------------- fidelity


def _ranks(values: Sequence[float]) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    ra, rb = _ranks(a), _ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def fidelity(data: dict[str, Any]) -> dict[str, Any]:
    table = parse_oracle(data)
    per_shape = []
    for shape, entry in table.entries.items():
        model = shape_times(shape)
        configs = [c for c, _ in entry.measured]
        measured = [t for _, t in entry.measured]
        predicted = [float(model[config_index(c)]) for c in configs]
        model_best = model_top_configs(shape, 1)[0]
        times = dict(entry.measured)
        best_measured = min(measured)
        regret = times.get(model_best, math.inf) / best_measured
        per_shape.append(
            {
                "shape": f"{shape.projection} M={shape.m}",
                "regime": shape.regime,
                "points": len(configs),
                "spearman": spearman(predicted, measured),
                "regret": regret,
                "model_best": str(model_best),
                "measured_best": str(configs[int(np.argmin(measured))]),
            }
        )
    summary: dict[str, Any] = {}
    for regime in (*REGIMES, "all"):
        rows = [r for r in per_shape if regime in ("all", r["regime"])]
        regrets = [r["regret"] for r in rows if math.isfinite(r["regret"])]
        summary[regime] = {
            "shapes": len(rows),
            "points": sum(r["points"] for r in rows),
            "spearman_median": float(np.median([r["spearman"] for r in rows])),
            "regret_median": float(np.median(regrets)) if regrets else math.nan,
            "regret_geomean": geomean(regrets),
            "regret_max": max(regrets, default=math.nan),
            "model_best_not_measured": len(rows) - len(regrets),
        }
    return {"summary": summary, "per_shape": per_shape}


# ------------------------------------------------------------------------------------- evaluate


def program_configs(path: Path, shapes: Sequence[GemmShape]) -> list[GemmConfig]:
    """The program's configs, computed in the sandbox (the program never runs in this process)."""
    from codevolve.core.config import SandboxLimits
    from codevolve.evaluator_workers.cascade import SandboxedCandidate
    from codevolve.evaluator_workers.sandbox import SandboxPool
    from codevolve.problems.gemm_tiling.stages import configs_or_error

    with SandboxPool(size=1) as pool:
        candidate = SandboxedCandidate(path.read_text(), limits=SandboxLimits(), pool=pool)
        reply = candidate.call("choose_config", [s.args for s in shapes])
    configs = configs_or_error(shapes, reply, hidden=frozenset())
    if isinstance(configs, str):
        raise SystemExit(f"{path}: {configs}")
    return configs


def evaluate(
    data: dict[str, Any], programs: Sequence[Path], samples: int, seed: int
) -> dict[str, Any]:
    from codevolve.problems.gemm_tiling_gpu.device.gemm_bench import GemmBench, device_info

    table = parse_oracle(data)
    shapes = all_shapes()
    test = set(heldout_shapes())
    choosers: dict[str, list[GemmConfig]] = {
        "expert": [expert_config(s.m, s.n, s.k) for s in shapes],
        "oracle": [table.entries[s].config for s in shapes],
    }
    for path in programs:
        choosers[path.stem] = program_configs(path, shapes)
    bench = GemmBench()
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in choosers}
    # Shape order shuffled, fresh inputs: an independent re-measurement, not the oracle's.
    order = np.random.default_rng(seed).permutation(len(shapes))
    measured: dict[int, dict[str, tuple[float, float]]] = {}
    for position, i in enumerate(order):
        shape = shapes[int(i)]
        names = list(choosers)
        timings = bench.measure(
            _pairs((shape, choosers[name][int(i)]) for name in names),
            seed=seed * 1000 + position,
            samples=samples,
            check=True,
            use_cache=False,
        )
        for name, timing in zip(names, timings, strict=True):
            if timing.status != "ok":
                raise SystemExit(f"{name} on {shape}: {timing.status} {timing.detail}")
        measured[int(i)] = {n: (t.t_us, t.cublas_us) for n, t in zip(names, timings, strict=True)}
    for i in range(len(shapes)):
        for name in choosers:
            times[name].append(measured[i][name])
    return {
        "device": device_info(),
        "samples": samples,
        "programs": {
            name: _summary(shapes, test, times, name, choosers[name]) for name in choosers
        },
    }


def _summary(
    shapes: Sequence[GemmShape],
    test: set[GemmShape],
    times: dict[str, list[tuple[float, float]]],
    name: str,
    configs: Sequence[GemmConfig],
) -> dict[str, Any]:
    rows = []
    for i, shape in enumerate(shapes):
        t, cublas = times[name][i]
        t_expert, cublas_expert = times["expert"][i]
        t_oracle, cublas_oracle = times["oracle"][i]
        # Each time relative to the cuBLAS time it alternated with: drift between them cancels.
        rel = t / cublas
        rows.append(
            {
                "shape": f"{shape.projection} M={shape.m}",
                "split": "test" if shape in test else "train",
                "regime": shape.regime,
                "config": str(configs[i]),
                "t_us": t,
                "cublas_us": cublas,
                "vs_expert": (t_expert / cublas_expert) / rel,
                "vs_oracle": (t_oracle / cublas_oracle) / rel,
                "vs_cublas": 1 / rel,
            }
        )
    out: dict[str, Any] = {"per_shape": rows}
    for split in ("all", "train", "test"):
        for regime in ("all", *REGIMES):
            chosen = [
                r for r in rows if split in ("all", r["split"]) and regime in ("all", r["regime"])
            ]
            key = f"{split}/{regime}"
            out[key] = {
                metric: geomean(r[metric] for r in chosen)
                for metric in ("vs_expert", "vs_oracle", "vs_cublas")
            }
    worst = min(rows, key=lambda r: r["vs_oracle"])
    out["worst_vs_oracle"] = {k: worst[k] for k in ("shape", "split", "config", "vs_oracle")}
    return out


def print_evaluation(result: dict[str, Any]) -> None:
    print(
        f"{'program':>18} {'split/regime':>14} {'vs expert':>10} {'vs oracle':>10} "
        f"{'vs cuBLAS':>10}"
    )
    for name, summary in result["programs"].items():
        for split in ("all", "train", "test"):
            for regime in ("all", *REGIMES):
                row = summary[f"{split}/{regime}"]
                print(
                    f"{name:>18} {split + '/' + regime:>14} {row['vs_expert']:10.3f} "
                    f"{row['vs_oracle']:10.3f} {row['vs_cublas']:10.3f}"
                )
        worst = summary["worst_vs_oracle"]
        print(
            f"{name:>18} worst vs oracle: {worst['shape']} ({worst['split']}) "
            f"{worst['config']} {worst['vs_oracle']:.3f}"
        )


# ----------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    hw = sub.add_parser("hardware")
    hw.add_argument("--out", type=Path)
    orc = sub.add_parser("oracle")
    orc.add_argument("--out", type=Path, required=True)
    orc.add_argument("--samples", type=int, default=7)
    orc.add_argument("--workers", type=int, default=14)
    fid = sub.add_parser("fidelity")
    fid.add_argument("--oracle", type=Path, required=True)
    fid.add_argument("--out", type=Path)
    ev = sub.add_parser("evaluate")
    ev.add_argument("--oracle", type=Path, required=True)
    ev.add_argument("programs", type=Path, nargs="*")
    ev.add_argument("--samples", type=int, default=30)
    ev.add_argument("--seed", type=int, default=1)
    ev.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    if args.command == "hardware":
        result = hardware()
    elif args.command == "oracle":
        result = oracle(args.samples, args.workers, args.out)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        return 0
    elif args.command == "fidelity":
        result = fidelity(json.loads(args.oracle.read_text()))
        print(json.dumps(result["summary"], indent=2))
    else:
        result = evaluate(
            json.loads(args.oracle.read_text()), args.programs, args.samples, args.seed
        )
        print_evaluation(result)
    if getattr(args, "out", None):
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    elif args.command == "hardware":
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
