"""Reference choosers and the scoring every candidate and baseline shares.

- expert: the hand rule of the initial program (small tiles for decode, bigger as M grows).
- lookup: one config per M, fitted on the train shapes (vLLM ships such per-M tables); M values the
  table lacks use the nearest fitted M on a log scale.
- oracle: the best launchable config of each shape under the cost model; a bound, not a program.

A speedup is ``t_expert / t_chosen`` per shape, summarised as a geometric mean over shapes;
"over oracle" is ``t_oracle / t_chosen`` (1.0 is the best any chooser can do).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from codevolve.problems.gemm_tiling.cost_model import (
    FloatArray,
    model_times,
    time_table,
    validation_time_table,
)
from codevolve.problems.gemm_tiling.errors import GemmTilingError
from codevolve.problems.gemm_tiling.shapes import (
    GemmShape,
    seen_test_shapes,
    shape_index,
    train_shapes,
    unseen_shapes,
    validation_shapes,
)
from codevolve.problems.gemm_tiling.space import GemmConfig, all_configs, config_index


def expert_config(m: int, n: int, k: int) -> GemmConfig:
    """The expert rule, as the initial program states it (N and K do not matter to it)."""
    del n, k
    if m <= 32:
        return GemmConfig(32, 64, 64, 2, 3, 8)
    if m <= 256:
        return GemmConfig(64, 128, 64, 4, 3, 8)
    return GemmConfig(128, 128, 64, 4, 3, 8)


def shape_times(shape: GemmShape) -> FloatArray:
    """Model times (microseconds) of one shape under all 6000 configs; inf where not launchable."""
    index, table = shape_index(), time_table
    if shape not in index:
        index, table = _validation_index(), validation_time_table
    row = index.get(shape)
    return model_times(shape) if row is None else table()[row]


@functools.cache
def _validation_index() -> dict[GemmShape, int]:
    return {shape: i for i, shape in enumerate(validation_shapes())}


def oracle_config(shape: GemmShape) -> GemmConfig:
    """The fastest launchable config of a shape (the first in space order among exact ties)."""
    return all_configs()[int(np.argmin(shape_times(shape)))]


def oracle_time_us(shape: GemmShape) -> float:
    return float(np.min(shape_times(shape)))


@dataclass(frozen=True, slots=True)
class LookupTable:
    """One config per token count M."""

    configs: Mapping[int, GemmConfig]

    def config_for(self, m: int) -> GemmConfig:
        """The config of the nearest fitted M on a log scale (the larger M on a tie)."""
        nearest = min(self.configs, key=lambda fitted: (abs(math.log2(fitted / m)), -fitted))
        return self.configs[nearest]


def fit_lookup_table(shapes: Sequence[GemmShape]) -> LookupTable:
    """For each M, the single config with the best geomean speedup over the shapes with that M."""
    configs: dict[int, GemmConfig] = {}
    for m in sorted({s.m for s in shapes}):
        with_m = [s for s in shapes if s.m == m]
        # The expert's times are fixed per shape, so the best geomean speedup is the least
        # sum of log times; unlaunchable configs sum to inf and never win.
        log_times = np.sum([np.log(shape_times(s)) for s in with_m], axis=0)
        configs[m] = all_configs()[int(np.argmin(log_times))]
    return LookupTable(configs)


@dataclass(frozen=True, slots=True)
class ShapeScore:
    """How one chosen config does on one shape. Times in microseconds; inf if not launchable."""

    shape: GemmShape
    config: GemmConfig
    launchable: bool
    time_us: float
    oracle_time_us: float
    expert_time_us: float

    @property
    def speedup(self) -> float:
        """t_expert / t_chosen; 0.0 when the config cannot launch."""
        return self.expert_time_us / self.time_us

    @property
    def over_oracle(self) -> float:
        """t_oracle / t_chosen, at most 1.0; 0.0 when the config cannot launch."""
        return self.oracle_time_us / self.time_us


def score_configs(shapes: Sequence[GemmShape], configs: Sequence[GemmConfig]) -> list[ShapeScore]:
    """Score ``configs[i]`` on ``shapes[i]`` under the cost model."""
    if len(shapes) != len(configs):
        raise GemmTilingError(f"{len(shapes)} shapes but {len(configs)} configs")
    scores = []
    for shape, config in zip(shapes, configs, strict=True):
        times = shape_times(shape)
        expert = expert_config(shape.m, shape.n, shape.k)
        scores.append(
            ShapeScore(
                shape=shape,
                config=config,
                launchable=config.launchable,
                time_us=float(times[config_index(config)]),
                oracle_time_us=float(np.min(times)),
                expert_time_us=float(times[config_index(expert)]),
            )
        )
    return scores


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive values; 0.0 if any is 0, nan for no values."""
    array = np.asarray(list(values), dtype=np.float64)
    if array.size == 0:
        return math.nan
    if np.any(array <= 0.0):
        return 0.0
    return float(np.exp(np.mean(np.log(array))))


def geomean_speedup(scores: Iterable[ShapeScore]) -> float:
    return geomean(s.speedup for s in scores)


def geomean_over_oracle(scores: Iterable[ShapeScore]) -> float:
    return geomean(s.over_oracle for s in scores)


@dataclass(frozen=True, slots=True)
class BaselineFigures:
    """Geomean speedups over the expert and ratios to the oracle, on train and on the test
    splits: ``test`` is the unseen projections (the held-out families), ``seen`` the seen
    projections at the grid M values train lacks for them."""

    name: str
    train_speedup: float
    test_speedup: float
    seen_speedup: float
    train_over_oracle: float
    test_over_oracle: float
    seen_over_oracle: float


@functools.cache
def baseline_figures() -> tuple[BaselineFigures, ...]:
    """Expert, lookup (fitted on train) and oracle on every split; computed once per process."""
    table = fit_lookup_table(train_shapes())
    choosers = {
        "expert": lambda s: expert_config(s.m, s.n, s.k),
        "lookup": lambda s: table.config_for(s.m),
        "oracle": oracle_config,
    }
    figures = []
    for name, choose in choosers.items():
        train, test, seen = (
            score_configs(shapes, [choose(s) for s in shapes])
            for shapes in (train_shapes(), unseen_shapes(), seen_test_shapes())
        )
        figures.append(
            BaselineFigures(
                name=name,
                train_speedup=geomean_speedup(train),
                test_speedup=geomean_speedup(test),
                seen_speedup=geomean_speedup(seen),
                train_over_oracle=geomean_over_oracle(train),
                test_over_oracle=geomean_over_oracle(test),
                seen_over_oracle=geomean_over_oracle(seen),
            )
        )
    return tuple(figures)
