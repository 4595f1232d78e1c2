"""gemm-tiling-gpu: the gemm-tiling task, judged on a real GPU.

Same program format and config space as gemm-tiling; its shapes are the eight projections the
H200 measured, two of them held out whole (split.py). The cascade starts on the cost model, on
any CPU worker: static check, six-shape probe, the 66 train and 72 validation shapes under the
model. A program whose model score keeps :data:`PROMOTION` of its parent's is promoted to the GPU
stage, which times the trusted Triton kernel with the program's configs on the train shapes and
on the validation shapes, the six seen projections at token counts between the grid's
(stages.py); its measured geomean speedup over the expert on those 138 shapes is the program's
score. The validation shapes are never held out: they
make the GPU judge the rules that no train shape reaches. One evaluation thus crosses worker
pools: the CPU part runs where capability "cpu" is served, the GPU part where "gpu" is.

The mutations are gemm-tiling's, but where a parent was timed on the GPU they read only its GPU
cases (:func:`measured_view`): the directed mutation then aims at the train shapes where the
parent trails the fastest time measured there, and copies the config that was measured fastest,
instead of chasing the cost model's optimum, which the GPU ranks differently (the model's best
config is 12 % slower than the measured best at the median shape, docs/results-gpu.md).

The per-shape oracle (oracle.py) is measured once per GPU model and stored as data; the held-out
test shapes are measured only for reports (bench/gpu_calibrate.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from codevolve.core.problem import Baseline, Mutation, ProblemSpec, Threshold
from codevolve.core.prompt import Prompt
from codevolve.problems.gemm_tiling.baselines import geomean
from codevolve.problems.gemm_tiling.problem import FEATURES, describe, gemm_tiling_problem
from codevolve.problems.gemm_tiling.stages import ProbeStage, StaticStage, TrainStage
from codevolve.problems.gemm_tiling_gpu.oracle import OracleEntry, load_oracle
from codevolve.problems.gemm_tiling_gpu.split import gpu_split
from codevolve.problems.gemm_tiling_gpu.stages import CASE_PREFIX, GpuTrainStage

NAME = "gemm-tiling-gpu"
# A child is timed on the GPU only if its model score keeps 97% of its parent's: the model ranks
# configs well enough to drop clear losers, not well enough to pick winners within a few %.
PROMOTION = Threshold(relative=0.97)


GPU_TASK = (
    "\n\nThe final score is measured on a real GPU (an NVIDIA H200): the geomean over "
    "the train shapes and 72 validation shapes (every projection above at M = 2, 4, 8, "
    "24, 48, 96, 192, 384, 768, 1536, 3072, 6144) of t_expert / t_chosen for the Triton "
    "kernel, cold L2, timed alternately with cuBLAS. Programs reach the GPU only when "
    "their cost-model score keeps 97% of their parent's."
)


def gemm_tiling_gpu_problem() -> ProblemSpec:
    split = gpu_split()
    return ProblemSpec(
        name=NAME,
        description=describe(split) + GPU_TASK,
        initial_program=gemm_tiling_problem().initial_program,
        stages=(
            StaticStage(split=split),
            ProbeStage(split=split),
            TrainStage(threshold=PROMOTION, split=split),
            GpuTrainStage(split=split),
        ),
        features=FEATURES,
        domain_mutations=_mutations,
        reference_baselines=_baselines,
    )


def _mutations() -> Sequence[Mutation]:
    # gemm-tiling's mutations, with octave rules sometimes bounded in M (token bands): on the
    # H200 the best tile of one output size differs between wide and narrow projections.
    from codevolve.problems.gemm_tiling.mutations import GPU_BAND_SHARE, gemm_mutations

    return tuple(MeasuredCasesMutation(m) for m in gemm_mutations(GPU_BAND_SHARE))


def _baselines() -> Sequence[Baseline]:
    """Measured speedups over the expert of the stored oracle (train, and test: the held-out
    projections), if measured."""
    oracle = load_oracle()
    if oracle is None:
        return ()
    figures = []
    for name in ("tutorial", "inductor", "oracle"):  # "oracle": the report divides by it
        by_split = []
        for split in (gpu_split().train, gpu_split().unseen_test):
            values = [_speedup(oracle.entries[s], name) for s in split]
            by_split.append(geomean(values))
        label = name if name == "oracle" else f"gpu_{name}"
        figures.append(Baseline(name=label, train=by_split[0], test=by_split[1]))
    return (Baseline(name="expert", train=1.0, test=1.0), *figures)


def _speedup(entry: OracleEntry, name: str) -> float:
    time = {"tutorial": entry.tutorial_us, "inductor": entry.inductor_us, "oracle": entry.time_us}
    return entry.expert_us / time[name]


def measured_view(prompt: Prompt) -> Prompt:
    """The prompt with the parent's cases and the best cases narrowed to the GPU's (train and
    validation shapes, measured times); unchanged when the parent has no GPU case (it never
    reached the GPU)."""
    measured = tuple(c for c in prompt.parent.cases if c.key.startswith(CASE_PREFIX))
    if not measured:
        return prompt
    best = {k: v for k, v in prompt.best_cases.items() if k.startswith(CASE_PREFIX)}
    return replace(prompt, parent=replace(prompt.parent, cases=measured), best_cases=best)


@dataclass(frozen=True, slots=True)
class MeasuredCasesMutation:
    """A gemm-tiling mutation that sees the prompt through :func:`measured_view`."""

    inner: Mutation

    @property
    def kind(self) -> str:
        return self.inner.kind

    @property
    def weight(self) -> float:
        """The wrapped mutation's chance of being tried first (1 if it declares none)."""
        return float(getattr(self.inner, "weight", 1.0))

    def propose(self, prompt: Prompt, rng: np.random.Generator) -> str | None:
        return self.inner.propose(measured_view(prompt), rng)
