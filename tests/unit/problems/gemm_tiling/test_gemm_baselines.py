"""Expert, lookup and oracle baselines, and the shared scoring."""

from __future__ import annotations

import math

import numpy as np
import pytest

from codevolve.problems.gemm_tiling import initial_program
from codevolve.problems.gemm_tiling.baselines import (
    LookupTable,
    baseline_figures,
    expert_config,
    fit_lookup_table,
    geomean,
    geomean_over_oracle,
    geomean_speedup,
    oracle_config,
    oracle_time_us,
    score_configs,
)
from codevolve.problems.gemm_tiling.cost_model import model_times
from codevolve.problems.gemm_tiling.errors import GemmTilingError
from codevolve.problems.gemm_tiling.shapes import GemmShape, all_shapes, train_shapes
from codevolve.problems.gemm_tiling.space import GemmConfig, validate


def test_expert_rule_matches_the_initial_program_on_every_shape() -> None:
    for shape in all_shapes():
        answer = validate(tuple(initial_program.choose_config(shape.m, shape.n, shape.k)))
        assert answer == expert_config(shape.m, shape.n, shape.k)


def test_baselines_order_expert_then_lookup_then_oracle_on_train() -> None:
    figures = {f.name: f for f in baseline_figures()}
    assert figures["expert"].train_speedup == pytest.approx(1.0)
    assert figures["expert"].test_speedup == pytest.approx(1.0)
    assert 1.0 <= figures["lookup"].train_speedup <= figures["oracle"].train_speedup
    assert figures["oracle"].train_over_oracle == pytest.approx(1.0)
    assert figures["oracle"].test_over_oracle == pytest.approx(1.0)
    assert figures["oracle"].test_speedup >= figures["lookup"].test_speedup


def test_lookup_table_fits_one_config_per_train_m_that_beats_the_alternatives() -> None:
    table = fit_lookup_table(train_shapes())
    assert set(table.configs) == {s.m for s in train_shapes()}
    m = 64
    with_m = [s for s in train_shapes() if s.m == m]
    fitted = geomean_speedup(score_configs(with_m, [table.configs[m]] * len(with_m)))
    for rival in (expert_config(m, 0, 0), GemmConfig(16, 64, 128, 4, 5, 1)):
        assert fitted >= geomean_speedup(score_configs(with_m, [rival] * len(with_m)))


def test_lookup_uses_the_nearest_m_on_a_log_scale_and_the_larger_on_a_tie() -> None:
    small, large = GemmConfig(32, 64, 64, 2, 3, 8), GemmConfig(128, 128, 64, 4, 3, 8)
    table = LookupTable({512: small, 2048: large})
    assert table.config_for(600) == small
    assert table.config_for(1024) == large
    assert table.config_for(1) == small
    assert table.config_for(100_000) == large


def test_oracle_is_the_fastest_launchable_config_of_an_unseen_shape() -> None:
    shape = GemmShape(3, 384, 640)
    times = model_times(shape)
    best = oracle_config(shape)
    assert best.launchable
    assert oracle_time_us(shape) == pytest.approx(float(np.min(times)))
    assert np.all(times >= oracle_time_us(shape))


def test_scores_report_times_against_expert_and_oracle() -> None:
    shape = all_shapes()[40]
    [score] = score_configs([shape], [oracle_config(shape)])
    assert score.launchable
    assert score.over_oracle == pytest.approx(1.0)
    assert score.speedup == pytest.approx(score.expert_time_us / score.oracle_time_us)


def test_unlaunchable_configs_score_zero() -> None:
    shape = all_shapes()[0]
    [score] = score_configs([shape], [GemmConfig(256, 256, 128, 4, 5, 8)])
    assert not score.launchable
    assert score.time_us == math.inf
    assert score.speedup == 0.0
    assert geomean_speedup([score]) == 0.0
    assert geomean_over_oracle([score]) == 0.0


def test_score_configs_needs_one_config_per_shape() -> None:
    with pytest.raises(GemmTilingError, match="2 shapes but 1 configs"):
        score_configs(all_shapes()[:2], [expert_config(1, 0, 0)])


def test_geomean_of_positive_values() -> None:
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert geomean([2.0, 0.0]) == 0.0
    assert math.isnan(geomean([]))
