"""The GPU stage of gemm-tiling-gpu: the candidate's configs timed on a real GPU.

The candidate runs only in the CPU sandbox and returns configs; the worker's device (a trusted
process holding the GPU) checks and times the kernel with them. The stage selects on the 66 train
shapes and the 72 validation shapes (the six seen projections at token counts between the grid's:
split.py); the two held-out projections are timed and reported only. On train alone, a rule
that only held-out shapes reach is never timed, and its config can be anything (a GPU-evolved
program once sent 8B.gate_up M=64 to a decode tile at 0.55 of the oracle that way). Per
selection shape the device measures the candidate's config and the expert's, each alternating
with cuBLAS; the shape's speedup is the ratio of the two cuBLAS-relative times,
``(t_expert / t_cublas) / (t_chosen / t_cublas')``, so drift between the two measurements
cancels. The device process caches measurements per (shape,
config): a child that changes the config of three shapes costs three new measurements, and the
expert is measured once per process.

Any config that does not compile or computes a wrong result fails the program; so does a device
fault (the device process is recycled).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from codevolve.core.device import GPU, Device
from codevolve.core.problem import TRAIN_SCORE, Candidate, Threshold
from codevolve.core.program import CaseResult, StageResult
from codevolve.problems.gemm_tiling.baselines import expert_config, geomean
from codevolve.problems.gemm_tiling.shapes import M_VALUES, GemmShape, Split
from codevolve.problems.gemm_tiling.space import GemmConfig
from codevolve.problems.gemm_tiling.stages import ask_configs
from codevolve.problems.gemm_tiling_gpu.oracle import load_oracle
from codevolve.problems.gemm_tiling_gpu.split import gpu_split

MEASURE_JOB = "gemm.measure"
SAMPLES = 15  # timed reps per (shape, config) during evolution
DEVICE_TIMEOUT_S = 900.0  # seconds: a first call compiles every config it meets
CASE_PREFIX = "gpu "  # measured times are keyed apart from the cost model's cases


@dataclass(frozen=True, slots=True)
class ShapeTiming:
    shape: GemmShape
    config: GemmConfig
    time_us: float
    cublas_us: float
    expert_us: float
    expert_cublas_us: float

    @property
    def speedup(self) -> float:
        return (self.expert_us / self.expert_cublas_us) / (self.time_us / self.cublas_us)

    @property
    def vs_cublas(self) -> float:
        return self.cublas_us / self.time_us


def measure_pairs(shapes: Sequence[GemmShape], configs: Sequence[GemmConfig]) -> list[list[int]]:
    """The device payload rows: each shape with the candidate's config, then with the expert's."""
    rows = []
    for shape, config in zip(shapes, configs, strict=True):
        expert = expert_config(shape.m, shape.n, shape.k)
        rows.append([shape.m, shape.n, shape.k, *config.as_tuple()])
        rows.append([shape.m, shape.n, shape.k, *expert.as_tuple()])
    return rows


@dataclass(frozen=True, slots=True)
class GpuTrainStage:
    """Geomean measured speedup over the expert on the train and validation shapes, on the
    worker's GPU; the held-out shapes measured alongside and only reported."""

    name: str = "gpu"
    threshold: Threshold | None = None
    capability: str = GPU
    samples: int = SAMPLES
    split: Split = field(default_factory=gpu_split)

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        del candidate, rng
        error = "the gpu stage needs a worker with a GPU (capability 'gpu')"
        return StageResult(stage=self.name, passed=False, score=None, error=error)

    def run_on(self, candidate: Candidate, device: Device, rng: np.random.Generator) -> StageResult:
        selection = self.split.train + self.split.validation
        test = self.split.unseen_test
        shapes = selection + test
        configs = ask_configs(self.name, candidate, shapes, hidden=frozenset(test))
        if isinstance(configs, StageResult):
            return configs
        payload: dict[str, Any] = {
            "pairs": measure_pairs(shapes, configs),
            "seed": int(rng.integers(2**31)),
            "samples": self.samples,
            "check": True,
            "use_cache": True,
        }
        answer = device.run(MEASURE_JOB, payload, timeout_s=DEVICE_TIMEOUT_S)
        if not answer.ok:
            kind = "device fault" if answer.fault else "device error"
            error = f"{kind}: {answer.error}"
            return StageResult(stage=self.name, passed=False, score=None, error=error)
        return score_timings(
            self.name,
            shapes,
            configs,
            answer.value,
            device_index=device.index,
            scored=len(selection),
        )


def score_timings(
    stage: str,
    shapes: Sequence[GemmShape],
    configs: Sequence[GemmConfig],
    value: Any,
    *,
    device_index: int,
    scored: int,
) -> StageResult:
    """The stage result from the device's reply (rows in :func:`measure_pairs` order).

    The first ``scored`` shapes are scored; the rest are held out: reported, never named.
    """
    rows = value["timings"]
    info = value.get("device", {})
    timings = []
    for i, (shape, config) in enumerate(zip(shapes, configs, strict=True)):
        ours, expert = rows[2 * i], rows[2 * i + 1]
        for row, who in ((ours, str(config)), (expert, "the expert's config")):
            if row["status"] != "ok":
                where = shape.key if i < scored else "a held-out shape"
                error = f"{where}: {who} is {row['status']}: {row['detail']}"
                return StageResult(stage=stage, passed=False, score=None, error=error)
        timings.append(
            ShapeTiming(
                shape=shape,
                config=config,
                time_us=float(ours["t_us"]),
                cublas_us=float(ours["cublas_us"]),
                expert_us=float(expert["t_us"]),
                expert_cublas_us=float(expert["cublas_us"]),
            )
        )
    return _result(stage, timings[:scored], timings[scored:], info, device_index)


def _over_oracle(timings: Sequence[ShapeTiming]) -> float | None:
    """Geomean of t_oracle / t_chosen over the timings of shapes the stored oracle has (the 88),
    each relative to its own interleaved cuBLAS time."""
    oracle = load_oracle()
    known = [t for t in timings if oracle is not None and t.shape in oracle.entries]
    if oracle is None or not known:
        return None
    return geomean(
        (oracle.entries[t.shape].time_us / oracle.entries[t.shape].cublas_us)
        / (t.time_us / t.cublas_us)
        for t in known
    )


def _result(
    stage: str,
    timings: list[ShapeTiming],
    heldout: list[ShapeTiming],
    info: dict[str, Any],
    device_index: int,
) -> StageResult:
    speedup = geomean(t.speedup for t in timings)
    # Train shapes sit on the grid's token counts; validation shapes between them.
    train = {t.shape for t in timings if t.shape.m in M_VALUES}
    metrics = {
        "gpu_speedup": speedup,
        # The train split alone, measured; it replaces the cost model's train_score (later stages
        # win), so the run report's train row is the GPU's.
        TRAIN_SCORE: geomean(t.speedup for t in timings if t.shape in train),
        "gpu_speedup_validation": geomean(t.speedup for t in timings if t.shape not in train),
        "gpu_vs_cublas": geomean(t.vs_cublas for t in timings),
        **{
            f"gpu_speedup_{regime}": geomean(t.speedup for t in timings if t.shape.regime == regime)
            for regime in ("decode", "mid", "prefill")
        },
    }
    test_speedup = geomean(t.speedup for t in heldout)
    held = {"score": test_speedup, "gpu_test_speedup": test_speedup}
    over, test_over = _over_oracle(timings), _over_oracle(heldout)
    if over is not None and test_over is not None:
        metrics["gpu_over_oracle"] = over
        held["gpu_test_over_oracle"] = test_over
    worst = sorted(timings, key=lambda t: t.speedup)[:3]
    feedback = (
        f"Measured on {info.get('name', 'the GPU')}: geomean speedup over the expert "
        f"{speedup:.3f}x on {len(timings)} train and validation shapes; slowest relative to the "
        "expert: "
        + "; ".join(
            f"{t.shape.key}: {t.config} {t.time_us:.1f} us ({t.speedup:.2f}x)" for t in worst
        )
    )
    return StageResult(
        stage=stage,
        passed=True,
        score=speedup,
        metrics=metrics,
        heldout=held,
        cases=tuple(
            CaseResult(key=CASE_PREFIX + t.shape.key, cost=t.time_us, detail=str(t.config))
            for t in timings
        ),
        feedback=feedback,
        artifacts={
            "device_index": str(device_index),
            "device_name": str(info.get("name", "")),
        },
    )
