"""gemm-tiling: evolve the tile configuration of a bf16 GEMM for LLM inference shapes.

Task. ``choose_config(M, N, K)`` returns the Triton launch configuration (six integers) for
``y = x @ W.T``, x [M, K], W [N, K], on the projections of seven LLM families (catalogue.py)
with 1 to 8192 tokens. The initial program is the expert rule (three configs chosen by M).

Metric. Under an analytical H100 cost model (cost_model.py), the geometric mean over the train
shapes of ``t_expert / t_chosen``; the expert scores 1.0. The same figure on the test splits is
reported, never selected on: the projections of three held-out families (no (N, K) of theirs is
in train), and the seen projections at token counts train lacks for them (shapes.py). Reference
points: a per-M lookup table fitted on train and the per-shape oracle (baselines.py).

Cascade (stages.py): static check and wide probe of launchability, a six-shape probe, the train
split. Features for MAP-Elites: how many distinct configs the program uses on train, and its
geomean speedup on the small-M (M <= 64) train shapes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources

from codevolve.core.problem import Baseline, FeatureSpec, Mutation, ProblemSpec
from codevolve.problems.gemm_tiling.baselines import baseline_figures
from codevolve.problems.gemm_tiling.shapes import M_VALUES, Split, tiling_split
from codevolve.problems.gemm_tiling.space import (
    BLOCK_K_VALUES,
    BLOCK_M_VALUES,
    BLOCK_N_VALUES,
    GROUP_M_VALUES,
    NUM_STAGES_VALUES,
    NUM_WARPS_VALUES,
)
from codevolve.problems.gemm_tiling.stages import ProbeStage, StaticStage, TrainStage

NAME = "gemm-tiling"

FEATURES = (
    # Distinct configs returned over the train shapes: 1-2, 3-4, ..., 15-16 (more clamps).
    FeatureSpec("distinct_configs", low=0.5, high=16.5, bins=8),
    # Geomean speedup over the expert on train shapes with M <= 64; the oracle reaches ~1.24.
    FeatureSpec("decode_speedup", low=0.7, high=1.3, bins=8),
)


def describe(split: Split) -> str:
    """The task as proposers read it; it names the seen projections, never the held-out ones."""
    names = {(s.n, s.k): s.projection for s in split.validation}
    projections = "\n".join(f"  {names[n, k]}: N={n}, K={k}" for n, k in split.seen_pairs)
    tokens = ", ".join(map(str, M_VALUES))
    return f"""\
Task: write choose_config(M, N, K) -> GemmConfig(block_m, block_n, block_k, num_warps, num_stages,
group_m) for a bf16 Triton matmul y = x @ W.T with x [M, K] and W [N, K] (nn.Linear layout) on an
H100-class GPU. One CTA computes a block_m x block_n tile of y, looping over K in block_k steps
with a num_stages-deep software pipeline; group_m M-tiles are swizzled together for L2 reuse.

Shapes: LLM weight matrices as one GPU holds them (_tpT: sharded over T GPUs; expert_*: one
expert of a mixture-of-experts layer),
{projections}
each with M (tokens) in {tokens}.
M <= 16 is decode (bound by reading W), 32-512 is mid-size, >= 1024 is prefill (bound by
tensor-core throughput). These shapes, and the same projections at other token counts, are
scored, except some held out and only reported; so are the projections of other models, whose
(N, K) pairs appear nowhere above: a rule should carry to weight shapes it has never seen.

Config space: block_m in {BLOCK_M_VALUES}, block_n in {BLOCK_N_VALUES},
block_k in {BLOCK_K_VALUES}, num_warps in {NUM_WARPS_VALUES}, num_stages in {NUM_STAGES_VALUES},
group_m in {GROUP_M_VALUES}. A config must launch:
  registers: block_m*block_n/(32*num_warps) + 40 <= 255 per thread;
  shared memory: num_stages*(block_m+block_n)*block_k*2 <= 232448 bytes;
  warps: num_warps <= block_m*block_n/256 (each warp owns at least a 16x16 accumulator tile).
For example 256x128 tiles need 8 warps. Every GemmConfig written with literal values anywhere in
the program is checked, and the program is also called on unseen shapes (every M up to 16384
for each projection above; other N and K, multiples of 128 and not: 1, odd, prime, up to N = 262144
and K = 65536): every answer must be six ints from these sets and launchable, and must not
raise.

Metric (higher is better): geometric mean over the train shapes of t_expert / t_chosen, timed by
an analytical model of the GPU (waves of tiles over 132 SMs, occupancy, tensor-core efficiency by
tile size, warps and wgmma eligibility, DRAM and L2 traffic, pipeline latency hiding, launch
overhead). The initial program (the expert rule) scores 1.0. Keep choose_config a pure function
of (M, N, K)."""


@functools.cache
def _initial_program() -> str:
    package = resources.files("codevolve.problems.gemm_tiling")
    return package.joinpath("initial_program.py").read_text(encoding="utf-8")


def gemm_tiling_problem() -> ProblemSpec:
    """The showcase problem; cheap to build (tables are computed on first use)."""
    return ProblemSpec(
        name=NAME,
        description=describe(tiling_split()),
        initial_program=_initial_program(),
        stages=(StaticStage(), ProbeStage(), TrainStage()),
        features=FEATURES,
        domain_mutations=_mutations,
        reference_baselines=_baselines,
    )


def _mutations() -> Sequence[Mutation]:
    # Imported here: the mutations module is optional to everything else in this problem.
    from codevolve.problems.gemm_tiling.mutations import gemm_mutations

    return gemm_mutations()


def _baselines() -> Sequence[Baseline]:
    """Geomean speedups over the expert: expert 1.0, lookup table, oracle (train, test)."""
    return tuple(
        Baseline(name=f.name, train=f.train_speedup, test=f.test_speedup)
        for f in baseline_figures()
    )
