"""The cascade of gemm-kernel-gpu, cheap to expensive: static, GPU probe, GPU.

1. ``static`` (any CPU worker): the source is read, never run (static_check.py). Score 1.0. (A
   :class:`~codevolve.core.problem.SourceCheckStage` of ``check_source``: problem.py.)
2. ``gpu_probe``: on the worker's device, the program is loaded (once per distinct source),
   checked on ragged shapes (M, N not multiples of any tile; K not a multiple of 64) and on the
   six probe shapes, and timed on the probe shapes against cuBLAS. A child must keep
   :data:`PROBE_KEEP` of its parent's probe score to be timed on all shapes.
3. ``gpu``: checked and timed on the selection shapes (selection.py: 69 of gemm-tiling's train
   and validation shapes, three per token count; the score is the geomean of t_cuBLAS / t over
   them). On a confirming evaluation only (the first sample of a would-be best's re-measure:
   :func:`confirming`) the test shapes are timed too, held out (reported, never selected on,
   never shown): the held-out families' projections (``heldout.score``: no (N, K) of theirs is
   in train or validation) and the seen projections at the grid M values train lacks. Per-shape
   times are the cases proposers see.

Every check and every clock is the judge's (device/kernel_judge.py; the program
runs only in a caged runner); a stage only sends the source and judges the plain data that comes
back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from codevolve.core.device import GPU, Device
from codevolve.core.problem import TRAIN_SCORE, Candidate, Threshold
from codevolve.core.program import CaseResult, StageResult
from codevolve.problems.gemm_kernel_gpu import stored
from codevolve.problems.gemm_kernel_gpu.launches import launch_keys
from codevolve.problems.gemm_kernel_gpu.selection import selection_shapes
from codevolve.problems.gemm_kernel_gpu.shape_features import SMS_METRIC
from codevolve.problems.gemm_tiling.baselines import geomean
from codevolve.problems.gemm_tiling.shapes import GemmShape, probe_shapes, tiling_split

MEASURE_JOB = "kernel.measure"
CASE_PREFIX = "gpu "
# Checked, never timed: M off every tile size, and K = 1056 off the 64- and 128-element K steps
# (so the masked K path is run: a mutation once broke it unseen while no shape reached it). K and
# N stay multiples of 16: TMA descriptors need 16-byte strides, and every other stride would
# compile each kernel once more.
RAGGED_SHAPES = ((1, 1280, 8192), (37, 384, 1056), (100, 1280, 512))
PROBE_KEEP = Threshold(relative=0.9)
# Timed batches per shape (after the judge's two warm-up batches), each the mean of the calls of
# about 20 ms of cuBLAS. 5 (was 10): 7 batches a shape instead of 12 (selection.py: what one
# evaluation may spend); the median of 5 such means is noisier than of 10 by an amount still to
# be measured on a GPU, and a would-be best is confirmed on fresh samples before it is reported.
PROBE_SAMPLES = 5
SAMPLES = 5  # timed batches per shape during evolution
CONFIRMING_SAMPLE = 1  # the re-measure sample that times the held-out shapes (selection.py)
# seconds: loading Python and CUDA, compiling every kernel the program launches, then the work
PROBE_TIMEOUT_S = 300.0
TIMEOUT_S = 900.0


@dataclass(frozen=True, slots=True)
class GpuKernelStage:
    """Check and time the program on the worker's GPU; score: geomean t_cuBLAS / t."""

    name: str
    shapes: tuple[GemmShape, ...]  # scored
    # timed and reported on a confirming evaluation only (:func:`confirming`), never scored
    heldout: tuple[GemmShape, ...] = ()
    unseen: int = 0  # the first ``unseen`` held-out shapes are held-out families' projections
    check_shapes: tuple[tuple[int, int, int], ...] = ()
    threshold: Threshold | None = None
    samples: int = SAMPLES
    timeout_s: float = TIMEOUT_S
    capability: str = GPU

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        del candidate, rng
        error = f"the {self.name} stage needs a worker with a GPU (capability 'gpu')"
        return StageResult(stage=self.name, passed=False, score=None, error=error)

    def judged_shapes(self) -> list[tuple[int, int, int]]:
        """Every shape the stage checks or times during the search, as (M, N, K)."""
        return [*self.check_shapes, *((s.m, s.n, s.k) for s in self.shapes)]

    def timed(self, *, confirm: bool) -> tuple[GemmShape, ...]:
        """The shapes timed: the scored ones, and the held-out ones too when confirming."""
        return (*self.shapes, *self.heldout) if confirm else self.shapes

    def run_on(self, candidate: Candidate, device: Device, rng: np.random.Generator) -> StageResult:
        confirm = confirming(candidate)
        shapes = [(s.m, s.n, s.k) for s in self.timed(confirm=confirm)]
        answered = stored.answer(
            launch_keys(candidate.source, [*self.check_shapes, *shapes]),
            getattr(candidate, "stored_timings", ()),
            device,
            checks=self.check_shapes,
            timed=shapes,
        )
        value: dict[str, Any] = {"load_error": "", "problems": [], "timings": []}
        if answered.checks or answered.timed:
            payload: dict[str, Any] = {
                "source": candidate.source,
                "shapes": [list(s) for s in answered.timed],
                "check_shapes": [list(s) for s in answered.checks],
                "seed": int(rng.integers(2**31)),
                "samples": self.samples,
            }
            answer = device.run(MEASURE_JOB, payload, timeout_s=self.timeout_s)
            if not answer.ok:
                kind = "device fault" if answer.fault else "device error"
                return self._failed(f"{kind}: {answer.error}")
            value = dict(answer.value) if isinstance(answer.value, dict) else {}
        rows = dict(zip(answered.timed, value.get("timings", []), strict=False))
        merged = {
            **value,
            "problems": self._problems(answered, value.get("problems", []), shapes),
            "timings": [
                stored.stored_row(answered.stored[s]) if s in answered.stored else rows[s]
                for s in shapes
                if s in answered.stored or s in rows
            ],
        }
        result = self.judge(merged, device_index=device.index, confirm=confirm)
        from_store = sum(1 for s in shapes if s in answered.stored)
        artifacts = {
            **result.artifacts,
            "from_store": f"{from_store}/{len(shapes)}",
            **_pipeline_artifacts(value),
        }
        fresh = stored.fresh_timings(answered, value, rows) if result.passed else ()
        return dataclasses.replace(result, artifacts=artifacts, launch_timings=fresh)

    def _problems(
        self, answered: stored.Answered, problems: list[str], shapes: list[tuple[int, int, int]]
    ) -> list[str]:
        """The device's problems per shape sent, as the judge's list over every checked shape
        (the shapes the store answered were checked right when they were timed)."""
        if not (problems and problems[-1]):
            return []
        sent = (*answered.checks, *answered.timed)
        wrong = sent[len(problems) - 1] if len(problems) <= len(sent) else None
        everything = (*self.check_shapes, *shapes)
        at = everything.index(wrong) if wrong in everything else len(everything) - 1
        return [""] * at + [problems[-1]]

    def _failed(self, error: str) -> StageResult:
        return StageResult(stage=self.name, passed=False, score=None, error=error)

    def judge(self, value: Any, *, device_index: int, confirm: bool = False) -> StageResult:
        """The stage result from the device's reply (kernel_jobs.py's format) for the shapes
        ``timed(confirm=confirm)``."""
        if value.get("load_error"):
            return self._failed(f"the program did not load: {value['load_error']}")
        problems = value.get("problems", [])
        if problems and problems[-1]:
            where = self._label(len(problems) - 1 - len(self.check_shapes))
            return self._failed(f"{where}: wrong result: {problems[-1]}")
        rows = value.get("timings", [])
        shapes = self.timed(confirm=confirm)
        if len(rows) != len(shapes):
            return self._failed(f"the device timed {len(rows)} of {len(shapes)} shapes")
        for i, row in enumerate(rows):
            if row["status"] != "ok":
                return self._failed(f"{self._label(i)}: {row['status']}: {row['detail']}")
        ratios = [row["cublas_us"] / row["t_us"] for row in rows]
        return self._result(ratios, rows, value.get("device", {}), device_index)

    def _label(self, index: int) -> str:
        """A shape named for the error, without naming a held-out one."""
        if index < 0:
            return f"ragged shape {self.check_shapes[len(self.check_shapes) + index]}"
        return self.shapes[index].key if index < len(self.shapes) else "a held-out shape"

    def _result(
        self, ratios: list[float], rows: list[Any], info: dict[str, Any], device_index: int
    ) -> StageResult:
        scored = len(self.shapes)
        mine = list(zip(self.shapes, ratios[:scored], rows[:scored], strict=True))
        score = geomean(r for _, r, _ in mine)
        train = set(tiling_split().train)
        metrics = {"vs_cublas": score}
        if any(s in train for s, _, _ in mine):
            metrics[TRAIN_SCORE] = geomean(r for s, r, _ in mine if s in train)
        features = {}
        for regime in ("decode", "mid", "prefill"):
            values = [r for s, r, _ in mine if s.regime == regime]
            if values:
                metrics[f"vs_cublas_{regime}"] = features[f"{regime}_vs_cublas"] = geomean(values)
        metrics["worst_vs_cublas"] = min(r for _, r, _ in mine)
        if isinstance(info.get("sms"), int):
            metrics[SMS_METRIC] = float(info["sms"])  # what the tuner's moves fill (shape_features)
        held = {}
        if len(ratios) > scored:  # a confirming evaluation: the held-out shapes were timed
            test = ratios[scored:]
            held = {"test_vs_cublas": geomean(test), "test_worst_vs_cublas": min(test)}
            if self.unseen:
                held["unseen_vs_cublas"] = geomean(test[: self.unseen])
            if self.unseen < len(test):
                held["seen_vs_cublas"] = geomean(test[self.unseen :])
            held["score"] = held.get("unseen_vs_cublas", held["test_vs_cublas"])
        worst = sorted(mine, key=lambda item: item[1])[:3]
        feedback = (
            f"Measured on {info.get('name', 'the GPU')}: geomean {score:.3f} of cuBLAS over "
            f"{scored} shapes; slowest relative to cuBLAS: "
            + "; ".join(f"{s.key}: {row['t_us']:.1f} us ({r:.2f}x)" for s, r, row in worst)
        )
        return StageResult(
            stage=self.name,
            passed=True,
            score=score,
            metrics=metrics,
            heldout=held,
            features=features,
            cases=tuple(
                CaseResult(key=CASE_PREFIX + s.key, cost=float(row["t_us"]), detail=f"{r:.3f}")
                for s, r, row in mine
            ),
            feedback=feedback,
            artifacts={"device_index": str(device_index), "device_name": str(info.get("name"))},
        )


def _pipeline_artifacts(value: dict[str, Any]) -> dict[str, str]:
    """How the device's pipeline judged it (kernel_jobs.py's reply): seconds in the compile
    lane, kernels its timing runner started with and compiled itself, judgings in its timing
    lane's pass."""
    compiled = value.get("compile")
    lane = value.get("lane")
    found: dict[str, str] = {}
    if isinstance(compiled, dict) and isinstance(compiled.get("seconds"), int | float):
        found["compile_s"] = f"{float(compiled['seconds']):.3f}"
    for name in ("compiled_ahead", "compiled_late"):
        if isinstance(value.get(name), int):
            found[name] = str(value[name])
    if isinstance(lane, dict) and isinstance(lane.get("judgings"), int):
        found["lane_pass_judgings"] = str(lane["judgings"])
    return found


def probe_stage() -> GpuKernelStage:
    return GpuKernelStage(
        name="gpu_probe",
        shapes=probe_shapes(),
        check_shapes=RAGGED_SHAPES,
        threshold=PROBE_KEEP,
        samples=PROBE_SAMPLES,
        timeout_s=PROBE_TIMEOUT_S,
    )


def full_stage() -> GpuKernelStage:
    split = tiling_split()
    return GpuKernelStage(
        name="gpu",
        shapes=selection_shapes(),
        heldout=split.unseen_test + split.seen_test,
        unseen=len(split.unseen_test),
    )


def confirming(candidate: Candidate) -> bool:
    """Whether this evaluation confirms a figure, so that the held-out shapes are timed too:
    the first sample of a would-be best's re-measure (``Task.remeasure`` 1, which ``codevolve
    evaluate`` sets too), never an evaluation that selection reads."""
    return getattr(candidate, "remeasure", 0) == CONFIRMING_SAMPLE
