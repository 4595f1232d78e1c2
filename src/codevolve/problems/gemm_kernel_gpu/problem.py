"""gemm-kernel-gpu: evolve the Triton GEMM kernel itself, its launch and its dispatch.

Task: ``matmul(x, w, y, workspace, num_sms)`` writes ``y = x @ w.T`` for bf16 x [M, K] and w [N, K]
(fp32 accumulation, bf16 out) on an NVIDIA H200, as fast as possible relative to cuBLAS. The
program holds its Triton kernels, their launch logic (grid, tile configs, split or persistent
scheduling) and a dispatch by shape; the initial program is gemm-tiling-gpu's kernel (tiled,
pointer loads, one program per tile) with that problem's best config rule
(data/gemm_tiling_gpu/programs/gpu_evolved_best.py).

Metric: geomean over the selection shapes (selection.py: 69 of the train and validation shapes of
gemm-tiling's catalogue and split, three per token count) of t_cuBLAS / t_program, each timed by
the judge in batches of calls on fresh inputs whose outputs are checked, cuBLAS through the same
path. The test shapes (held-out model families, and the seen projections at M values train lacks)
are timed only to confirm a would-be best, and only reported.

Cascade (stages.py): the static check on any CPU worker, then on a GPU worker a probe (ragged
shapes checked, six shapes timed; a child keeps 90 % of its parent's probe score), then the
selection shapes. The candidate's kernels are compiled in a caged compile runner without a GPU,
then its module is loaded and launched in a caged runner of the GPU worker's device process
(device/kernel_pipeline.py); the judge there owns inputs, outputs, workspace and clocks
(device/kernel_judge.py). Mutations (mutations.py) add and tune kernel variants
per regime, propose the launch families a tuner sweeps and rules on shape features
(tuner_moves.py), recombine the best launches measured per feature bucket (recombination.py),
and keep gemm-tiling's rule mutations for the tiled kernel's configs. The prompt carries the
same per-bucket table of measured launches. The search starts from the initial program: no
launch found by an earlier run is seeded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from codevolve.core.launch_store import LaunchKey
from codevolve.core.problem import FeatureSpec, Mutation, ProblemSpec, SourceCheckStage
from codevolve.core.prompt import ProgramView
from codevolve.problems.gemm_kernel_gpu.kernel_source import initial_program
from codevolve.problems.gemm_kernel_gpu.launches import launch_keys
from codevolve.problems.gemm_kernel_gpu.stages import GpuKernelStage, full_stage, probe_stage
from codevolve.problems.gemm_kernel_gpu.static_check import check_source

NAME = "gemm-kernel-gpu"
FEATURES = (
    FeatureSpec(name="decode_vs_cublas", low=0.5, high=1.25, bins=6),
    FeatureSpec(name="prefill_vs_cublas", low=0.5, high=1.1, bins=6),
)


DESCRIPTION = (
    "Write the fastest bf16 GEMM y = x @ w.T (x [M, K], w [N, K], fp32 accumulation, bf16 "
    "out) in Triton for an NVIDIA H200 (132 SMs, Hopper: wgmma, TMA tensor descriptors). "
    "The program's matmul(x, w, y, workspace, num_sms) launches its own kernels; "
    "workspace is fp32 scratch of at least max(4 * M * N, 2**24) elements holding "
    "garbage. Shapes are LLM projections (N, K) of several model families at M = 1..8192 "
    "tokens; the test split holds out whole model families, so a dispatch keyed on exact "
    "(N, K) pairs does not carry over. Score: geomean over a fixed set of train and "
    "validation shapes (three per token count) of t_cuBLAS / t_program, timed in batches "
    "on fresh inputs whose outputs are checked, "
    "cuBLAS through the same path. Only Triton and math may be imported: no torch, no "
    "streams, no "
    "threads, no caching of results; every element of y must be written."
)


@dataclass(frozen=True, slots=True)
class GemmKernelGpuProblem(ProblemSpec):
    """The problem, with the launches each program takes (read from its source)."""

    def launch_keys(self, source: str) -> list[LaunchKey] | None:
        """The launches the program takes on every shape its GPU stages judge, read from the
        source (launches.py): what the launch store is asked for (docs/launch-store.md)."""
        shapes = {
            shape
            for stage in self.stages
            if isinstance(stage, GpuKernelStage)
            for shape in stage.judged_shapes()
        }
        keys = launch_keys(source, sorted(shapes))
        return None if keys is None else sorted(set(keys.values()), key=str)


def gemm_kernel_gpu_problem() -> GemmKernelGpuProblem:
    return GemmKernelGpuProblem(
        name=NAME,
        description=DESCRIPTION,
        initial_program=initial_program(),
        # the static check (static_check.py), then the GPU: a probe, then every shape
        stages=(SourceCheckStage(check_source), probe_stage(), full_stage()),
        features=FEATURES,
        domain_mutations=_mutations,
        notes=_notes,
    )


def _notes(parent: ProgramView, inspirations: Sequence[ProgramView]) -> str:
    """The prompt's table: per shape-feature bucket, the best launch measured (recombination.py)."""
    from codevolve.problems.gemm_kernel_gpu.recombination import measured_table

    return measured_table(parent, inspirations)


def _mutations() -> Sequence[Mutation]:
    from codevolve.problems.gemm_kernel_gpu.mutations import kernel_mutations

    return kernel_mutations()
