"""The GPU oracle: per-shape autotuning over a trusted candidate set, measured once per GPU model.

Candidates per shape (research/gemm_gpu.md section 4.4):

- the cost model's :data:`MODEL_TOP` best launchable configs of the shape;
- the Triton tutorial's autotune list (``03-matrix-multiplication.py``; its BK=128 configs
  exceed shared memory in bf16 and drop out as not launchable);
- PyTorch inductor's ``mm_configs``, scaled to the shape as inductor does (blocks shrink to
  ``max(min(block, next_pow2(dim)), 16)``, warps clamp to ``BM*BN/256``);
- the expert rule's config;
- second round: every launchable neighbour (one field one step up or down its value set) of the
  :data:`REFINE_TOP` fastest configs measured in the first round, a local search around the
  measured optimum that the model's ranking may have missed.

``bench/gpu_calibrate.py oracle`` measures them all on the GPU (correctness checked, cold L2,
interleaved cuBLAS), re-times the three fastest per shape, and stores the table as JSON under
``data/`` with the GPU's name and the method; :func:`load_oracle` reads it back.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

import numpy as np

from codevolve.problems.gemm_tiling.baselines import expert_config, shape_times
from codevolve.problems.gemm_tiling.errors import GemmTilingError
from codevolve.problems.gemm_tiling.shapes import GemmShape, all_shapes
from codevolve.problems.gemm_tiling.space import VALUE_SETS, GemmConfig, all_configs

MODEL_TOP = 32  # cost-model configs per shape
REFINE_TOP = 4  # measured configs per shape whose neighbours the second round measures
ORACLE_FILE = "oracle_h200.json"

# (BM, BN, BK, stages, warps), all GROUP_M 8: triton-lang/triton python/tutorials/
# 03-matrix-multiplication.py, get_cuda_autotune_config().
TUTORIAL = (
    (128, 256, 64, 3, 8),
    (64, 256, 32, 4, 4),
    (128, 128, 32, 4, 4),
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (128, 32, 32, 4, 4),
    (64, 32, 32, 5, 2),
    (32, 64, 32, 5, 2),
    (128, 256, 128, 3, 8),
    (256, 128, 128, 3, 8),
    (256, 64, 128, 4, 4),
    (64, 256, 128, 4, 4),
    (128, 128, 128, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (128, 32, 64, 4, 4),
)

# (BM, BN, BK, stages, warps): pytorch/pytorch torch/_inductor/template_heuristics/triton.py,
# mm_configs.
INDUCTOR = (
    (32, 32, 16, 1, 2),
    (32, 32, 128, 2, 4),
    (32, 64, 32, 5, 8),
    (64, 32, 32, 5, 8),
    (64, 32, 128, 5, 4),
    (64, 64, 16, 2, 4),
    (64, 64, 32, 2, 4),
    (64, 64, 64, 3, 8),
    (64, 64, 128, 5, 4),
    (64, 128, 32, 3, 4),
    (64, 128, 32, 4, 8),
    (64, 128, 64, 3, 4),
    (64, 128, 128, 4, 4),
    (128, 64, 32, 3, 4),
    (128, 64, 32, 4, 8),
    (128, 128, 32, 2, 8),
    (128, 128, 32, 3, 4),
    (128, 128, 64, 3, 4),
    (128, 128, 64, 5, 8),
    (128, 128, 128, 4, 8),
)


def _next_pow2(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


def tutorial_configs() -> tuple[GemmConfig, ...]:
    """The tutorial list's launchable configs (11 of 16 in bf16)."""
    configs = (GemmConfig(bm, bn, bk, w, s, 8) for bm, bn, bk, s, w in TUTORIAL)
    return tuple(c for c in configs if c.launchable)


def inductor_configs(shape: GemmShape) -> tuple[GemmConfig, ...]:
    """Inductor's list scaled to the shape, de-duplicated, launchable ones only."""
    scaled: dict[GemmConfig, None] = {}
    for bm, bn, bk, stages, warps in INDUCTOR:
        bm = max(min(bm, _next_pow2(shape.m)), 16)
        bn = max(min(bn, _next_pow2(shape.n)), 16)
        bk = max(min(bk, _next_pow2(shape.k)), 16)
        warps = max(1, min(warps, bm * bn // 256))
        config = GemmConfig(bm, bn, bk, warps, stages, 8)
        if config.launchable:
            scaled[config] = None
    return tuple(scaled)


def model_top_configs(shape: GemmShape, count: int = MODEL_TOP) -> tuple[GemmConfig, ...]:
    times = shape_times(shape)
    order = np.argsort(times, kind="stable")[:count]
    return tuple(all_configs()[int(i)] for i in order if np.isfinite(times[int(i)]))


def candidate_configs(shape: GemmShape) -> tuple[GemmConfig, ...]:
    """Every config the oracle measures on ``shape``, without repeats, model's best first."""
    configs = (
        *model_top_configs(shape),
        *tutorial_configs(),
        *inductor_configs(shape),
        expert_config(shape.m, shape.n, shape.k),
    )
    return tuple(dict.fromkeys(configs))


def neighbours(config: GemmConfig) -> tuple[GemmConfig, ...]:
    """Launchable configs that differ from ``config`` in one field by one step of its value set."""
    values = list(config.as_tuple())
    found = []
    for field, allowed in enumerate(VALUE_SETS):
        position = allowed.index(values[field])
        for step in (-1, 1):
            if 0 <= position + step < len(allowed):
                moved = values.copy()
                moved[field] = allowed[position + step]
                candidate = GemmConfig(*moved)
                if candidate.launchable:
                    found.append(candidate)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class OracleEntry:
    """One shape of the stored oracle. Times in microseconds, medians."""

    shape: GemmShape
    config: GemmConfig  # the fastest candidate, after re-timing the top three
    time_us: float
    cublas_us: float  # cuBLAS timed alternately with the oracle config's final re-timing
    expert_us: float
    tutorial_us: float  # best of the tutorial list on this shape
    inductor_us: float  # best of inductor's scaled list on this shape
    measured: tuple[tuple[GemmConfig, float], ...]  # every candidate that ran correctly


@dataclass(frozen=True, slots=True)
class Oracle:
    gpu: str
    method: str
    entries: dict[GemmShape, OracleEntry]


def parse_oracle(data: dict[str, object]) -> Oracle:
    """The table as stored; a sweep that was cut short (``"complete": false``) is refused."""
    if data.get("complete") is False:
        raise GemmTilingError("the oracle table is incomplete: its sweep was cut short")
    shapes = {(s.m, s.n, s.k): s for s in all_shapes()}
    entries = {}
    rows = data["shapes"]
    assert isinstance(rows, list)
    for row in rows:
        shape = shapes[(row["m"], row["n"], row["k"])]
        entries[shape] = OracleEntry(
            shape=shape,
            config=GemmConfig(*row["config"]),
            time_us=float(row["time_us"]),
            cublas_us=float(row["cublas_us"]),
            expert_us=float(row["expert_us"]),
            tutorial_us=float(row["tutorial_us"]),
            inductor_us=float(row["inductor_us"]),
            measured=tuple((GemmConfig(*c), float(t)) for c, t in row["measured"]),
        )
    return Oracle(gpu=str(data["gpu"]), method=str(data["method"]), entries=entries)


@functools.cache
def load_oracle(name: str = ORACLE_FILE) -> Oracle | None:
    """The stored oracle, or None when it was not measured yet."""
    path = resources.files("codevolve.problems.gemm_tiling_gpu").joinpath("data", name)
    if not path.is_file():
        return None
    return parse_oracle(json.loads(path.read_text(encoding="utf-8")))
