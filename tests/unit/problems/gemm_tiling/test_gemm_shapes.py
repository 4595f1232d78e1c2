"""The 88 gemm shapes, their fixed random split and the probe shapes."""

from __future__ import annotations

import itertools
from collections import Counter

from codevolve.problems.gemm_tiling import shapes
from codevolve.problems.gemm_tiling.shapes import (
    M_VALUES,
    GemmShape,
    all_shapes,
    heldout_shapes,
    probe_shapes,
    train_shapes,
)


def test_there_are_88_distinct_shapes_from_8_projections_and_11_token_counts() -> None:
    assert len(all_shapes()) == 88 == len(set(all_shapes()))
    assert len({(s.n, s.k) for s in all_shapes()}) == 8
    assert len({s.m for s in all_shapes()}) == 11


def test_shapes_carry_model_and_projection_names() -> None:
    names = {s.projection for s in all_shapes()}
    assert {"8B.qkv", "8B.gate_up", "70B_tp8.o", "70B_tp8.down"} <= names
    shape = GemmShape(16, 6144, 4096, "8B.qkv")
    assert shape in all_shapes()
    assert shape.key == "M=16 N=6144 K=4096"
    assert str(shape) == "8B.qkv M=16"
    assert shape.model == "8B"


def test_regimes_split_m_at_16_and_1024() -> None:
    regimes = {m: GemmShape(m, 128, 128).regime for m in (1, 16, 32, 512, 1024, 8192)}
    assert regimes == {
        1: "decode",
        16: "decode",
        32: "mid",
        512: "mid",
        1024: "prefill",
        8192: "prefill",
    }


def test_split_is_44_train_and_44_test_covering_all_shapes_once() -> None:
    train, test = train_shapes(), heldout_shapes()
    assert len(train) == len(test) == 44
    assert set(train).isdisjoint(test)
    assert set(train) | set(test) == set(all_shapes())


def test_split_is_stratified_by_m_disjoint_and_repeats_exactly() -> None:
    expected = list(train_shapes())
    assert Counter(s.m for s in expected) == {m: 4 for m in M_VALUES}
    assert not set(expected) & set(heldout_shapes())
    assert set(expected) | set(heldout_shapes()) == set(all_shapes())
    shapes._split.cache_clear()
    assert list(train_shapes()) == expected


def test_split_pins_its_regime_counts() -> None:
    # Changing SPLIT_SEED changes these; every figure of the problem moves with them.
    assert Counter(s.regime for s in train_shapes()) == {"decode": 8, "mid": 20, "prefill": 16}


def test_probe_shapes_are_six_train_shapes_spanning_regimes_and_models() -> None:
    probes = probe_shapes()
    assert len(probes) == 6
    assert set(probes) <= set(train_shapes())
    assert {(s.regime, s.model) for s in probes} == {
        (regime, model) for regime in ("decode", "mid", "prefill") for model in ("8B", "70B_tp8")
    }


def test_validation_shapes_are_every_projection_between_the_grid_values_and_none_of_the_88() -> (
    None
):
    validation = shapes.validation_shapes()
    assert len(validation) == 96 == len(set(validation))
    assert set(validation).isdisjoint(all_shapes())
    assert {(s.n, s.k) for s in validation} == {(s.n, s.k) for s in all_shapes()}
    values = sorted({s.m for s in validation})
    assert values == list(shapes.VALIDATION_M_VALUES)
    # Each octave the grid skips below 16, then one token count between neighbouring grid values.
    assert [m for m in values if m < 16] == [2, 4, 8]
    for low, high in itertools.pairwise(M_VALUES[1:]):
        assert sum(low < m < high for m in values) == 1
    assert max(values) < max(M_VALUES)
    assert all(s.projection != "unseen" for s in validation)
