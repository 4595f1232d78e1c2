"""The analytical H100 cost model: the behaviours DESIGN.md section 8 requires, and sanity."""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt
import pytest

from codevolve.problems.gemm_tiling import cost_model
from codevolve.problems.gemm_tiling.baselines import expert_config
from codevolve.problems.gemm_tiling.cost_model import (
    HBM_BYTES_PER_S,
    LAUNCH_S,
    kernel_time_us,
    model_time,
    model_times,
    paired_times,
    roofline_us,
    time_table,
)
from codevolve.problems.gemm_tiling.shapes import M_VALUES, PROJECTIONS, GemmShape, all_shapes
from codevolve.problems.gemm_tiling.space import (
    ConfigArrays,
    GemmConfig,
    all_configs,
    config_index,
    config_space,
)

Table = npt.NDArray[np.float64]


@pytest.fixture(scope="module")
def table() -> Table:
    time_table.cache_clear()
    start = time.perf_counter()
    computed = time_table()
    assert time.perf_counter() - start < 20.0  # seconds; about 3 on a laptop core (583 shapes)
    return computed


def _expert_over_oracle(table: Table) -> dict[GemmShape, float]:
    ratios = {}
    for row, shape in enumerate(all_shapes()):
        expert = table[row, config_index(expert_config(shape.m, shape.n, shape.k))]
        ratios[shape] = float(expert / table[row].min())
    return ratios


def test_table_is_a_row_per_grid_shape_with_inf_exactly_where_configs_cannot_launch(
    table: Table,
) -> None:
    assert table.shape == (len(all_shapes()), 6000) == (583, 6000)
    launchable = config_space().launchable
    assert np.all(np.isfinite(table[:, launchable]))
    assert np.all(table[:, launchable] > 0)
    assert np.all(np.isinf(table[:, ~launchable]))


def test_single_config_and_paired_times_match_the_table(table: Table) -> None:
    shape = all_shapes()[17]
    config = GemmConfig(64, 128, 64, 4, 3, 8)
    assert model_time(shape, config) == pytest.approx(table[17, config_index(config)])
    np.testing.assert_allclose(model_times(shape), table[17])
    configs = [all_configs()[i] for i in (5, 500, 5000)]
    paired = paired_times(all_shapes()[:3], ConfigArrays.of(configs))
    np.testing.assert_allclose(paired, [table[i, c] for i, c in enumerate((5, 500, 5000))])


def test_decode_on_large_n_is_bound_by_reading_the_weights_and_many_configs_tie(
    table: Table,
) -> None:
    for row, shape in enumerate(all_shapes()):
        # K < 1024 (Mixtral-8x22B_tp8.o, 9 MB of weights): a short K loop, so launch and the
        # pipeline's prologue dominate, not the weights (research/gemm_gpu.md section 0).
        if shape.m > 16 or shape.n < 6144 or shape.k < 1024:
            continue
        best = table[row].min()
        weights_us = 1e6 * 2 * shape.n * shape.k / HBM_BYTES_PER_S
        assert best <= 1e6 * LAUNCH_S + 1.3 * weights_us, shape
        assert np.sum(table[row] <= 1.02 * best) >= 50, shape


def test_prefill_prefers_big_eight_warp_tiles_with_three_or_four_stages(table: Table) -> None:
    prefill = [(row, s) for row, s in enumerate(all_shapes()) if s.m >= 1024]
    big = 0
    for row, _ in prefill:
        best = all_configs()[int(np.argmin(table[row]))]
        big += (
            best.block_m * best.block_n == 32768
            and best.num_warps == 8
            and (best.num_stages in (3, 4))
        )
    assert big >= 0.75 * len(prefill)


def test_the_expert_is_tens_of_percent_slower_at_prefill(table: Table) -> None:
    ratios = [r for s, r in _expert_over_oracle(table).items() if s.m >= 1024]
    geomean = float(np.exp(np.mean(np.log(ratios))))
    assert 1.15 <= geomean <= 1.6
    assert sum(r >= 1.15 for r in ratios) >= 0.75 * len(ratios)


def test_256x128_tiles_do_not_launch_with_four_warps() -> None:
    shape = GemmShape(4096, 4096, 4096)
    assert model_time(shape, GemmConfig(256, 128, 64, 4, 3, 8)) == np.inf
    assert np.isfinite(model_time(shape, GemmConfig(256, 128, 64, 8, 3, 8)))


def test_the_expert_is_furthest_from_the_oracle_at_mid_size_m(table: Table) -> None:
    ratios = _expert_over_oracle(table)
    worst_shape = max(ratios, key=ratios.__getitem__)
    assert worst_shape.regime == "mid"
    assert 2.0 <= ratios[worst_shape] <= 3.0
    worst_decode = max(r for s, r in ratios.items() if s.regime == "decode")
    worst_prefill = max(r for s, r in ratios.items() if s.regime == "prefill")
    assert ratios[worst_shape] > 1.05 * max(worst_decode, worst_prefill)


def test_no_config_beats_the_roofline(table: Table) -> None:
    for row, shape in enumerate(all_shapes()):
        assert table[row].min() >= roofline_us(shape), shape


def test_more_tokens_never_run_faster_under_the_same_config(table: Table) -> None:
    per_projection = table.reshape(len(PROJECTIONS), len(M_VALUES), -1)  # (53, 11, 6000)
    steps = np.diff(per_projection[..., config_space().launchable], axis=1)
    assert np.all(steps >= 0)


@pytest.mark.parametrize("grow", ["n", "k"])
def test_wider_or_deeper_matrices_never_run_faster_under_the_same_config(grow: str) -> None:
    rng = np.random.default_rng(7)
    space = config_space()
    launchable = space.launchable
    for _ in range(20):
        m, n, k = (float(v) for v in (rng.integers(1, 9000), *128 * rng.integers(1, 200, 2)))
        extra = 128.0 * float(rng.integers(1, 40))
        before = kernel_time_us(np.float64(m), np.float64(n), np.float64(k), space)
        n2, k2 = (n + extra, k) if grow == "n" else (n, k + extra)
        after = kernel_time_us(np.float64(m), np.float64(n2), np.float64(k2), space)
        assert np.all(after[launchable] >= before[launchable])


def test_warp_efficiency_per_warp_never_rises_with_more_warps() -> None:
    warps = np.arange(1.0, 65.0)
    per_warp = cost_model.warp_efficiency(warps) / warps
    assert np.all(np.diff(per_warp) <= 1e-12)
    assert cost_model.warp_efficiency(np.array([8.0, 64.0])).tolist() == [1.0, 1.0]
