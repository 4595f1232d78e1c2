"""The catalogue's shapes, the split that holds out whole model families, and the probe shapes."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from codevolve.problems.gemm_tiling import shapes
from codevolve.problems.gemm_tiling.catalogue import CATALOGUE, FAMILIES, MEASURED, Projection
from codevolve.problems.gemm_tiling.errors import GemmTilingError
from codevolve.problems.gemm_tiling.shapes import (
    HELD_OUT_FAMILIES,
    M_VALUES,
    GemmShape,
    all_shapes,
    heldout_shapes,
    probe_shapes,
    seen_test_shapes,
    split_projections,
    tiling_split,
    train_shapes,
    unseen_shapes,
    validation_shapes,
)

REGIMES = ("decode", "mid", "prefill")


def pairs(group: tuple[GemmShape, ...]) -> set[tuple[int, int]]:
    return {(s.n, s.k) for s in group}


def test_the_catalogue_holds_each_pair_once_from_seven_families_and_every_token_count() -> None:
    assert len(CATALOGUE) == 53 == len({(p.n, p.k) for p in CATALOGUE})
    assert len({p.name for p in CATALOGUE}) == 53
    assert FAMILIES == ("llama", "qwen", "mistral", "deepseek", "gemma", "phi", "mixtral")
    assert len(all_shapes()) == 53 * 11 == len(set(all_shapes()))
    assert {s.m for s in all_shapes()} == set(M_VALUES)


def test_the_measured_projections_are_the_eight_llama_ones_the_gpu_tables_hold() -> None:
    assert [(p.name, p.n, p.k) for p in MEASURED] == [
        ("8B.qkv", 6144, 4096),
        ("8B.o", 4096, 4096),
        ("8B.gate_up", 28672, 4096),
        ("8B.down", 4096, 14336),
        ("70B_tp8.qkv", 1280, 8192),
        ("70B_tp8.o", 8192, 1024),
        ("70B_tp8.gate_up", 7168, 8192),
        ("70B_tp8.down", 8192, 3584),
    ]


def test_projections_follow_the_public_configs_and_vllm_sharding() -> None:
    by_name = {p.name: (p.n, p.k) for p in CATALOGUE}
    # Qwen2.5-72B at tensor parallel 4: hidden 8192, 64 heads, 8 kv heads, intermediate 29568.
    assert by_name["Qwen2.5-72B_tp4.qkv"] == ((64 + 2 * 8) * 128 // 4, 8192)
    assert by_name["Qwen2.5-72B_tp4.down"] == (8192, 29568 // 4)
    # One expert of Mixtral-8x22B at tensor parallel 8: gate_up splits N, down splits K.
    assert by_name["Mixtral-8x22B_tp8.expert_gate_up"] == (2 * 16384 // 8, 6144)
    assert by_name["Mixtral-8x22B_tp8.expert_down"] == (6144, 16384 // 8)
    # Gemma-2-9B's head dim is 256: its o projection reads 16 * 256 features.
    assert by_name["Gemma-2-9B.o"] == (3584, 4096)


def test_shapes_carry_model_and_projection_names() -> None:
    names = {s.projection for s in all_shapes()}
    assert {"8B.qkv", "70B_tp8.down", "Phi-3-medium.qkv", "DeepSeek-V2-Lite.kv_b"} <= names
    shape = GemmShape(16, 6144, 4096, "8B.qkv")
    assert shape in all_shapes()
    assert shape.key == "M=16 N=6144 K=4096"
    assert str(shape) == "8B.qkv M=16"
    assert shape.model == "8B"
    assert Projection("Qwen2.5-72B_tp4.o", 8192, 2048, "qwen").model == "Qwen2.5-72B_tp4"


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


def test_no_test_pair_of_a_held_out_family_is_in_train_or_validation() -> None:
    selected = pairs(train_shapes()) | pairs(validation_shapes())
    assert pairs(unseen_shapes()).isdisjoint(selected)
    assert {p.family for p in CATALOGUE if (p.n, p.k) in pairs(unseen_shapes())} == set(
        HELD_OUT_FAMILIES
    )
    assert {p.family for p in CATALOGUE if (p.n, p.k) in selected} == set(FAMILIES) - set(
        HELD_OUT_FAMILIES
    )


def test_the_splits_cover_every_grid_shape_once() -> None:
    parts = (train_shapes(), seen_test_shapes(), unseen_shapes())
    assert sum(len(part) for part in parts) == len(all_shapes())
    assert set().union(*parts) == set(all_shapes())
    assert set(heldout_shapes()) == set(seen_test_shapes()) | set(unseen_shapes())
    assert set(validation_shapes()).isdisjoint(all_shapes())


def test_every_seen_model_and_regime_is_in_train_and_train_spans_the_test_sizes() -> None:
    seen_models = {s.model for s in validation_shapes()}
    for model, regime in itertools.product(seen_models, REGIMES):
        assert [s for s in train_shapes() if s.model == model and s.regime == regime], (
            model,
            regime,
        )
    for dim in (0, 1):
        train = [pair[dim] for pair in pairs(train_shapes())]
        assert all(min(train) <= pair[dim] <= max(train) for pair in pairs(unseen_shapes()))


def test_the_seen_split_is_stratified_by_m_and_repeats_exactly() -> None:
    expected = tiling_split()
    seen = len(pairs(validation_shapes()))
    assert Counter(s.m for s in expected.train) == {m: seen - seen // 2 for m in M_VALUES}
    assert Counter(s.m for s in expected.seen_test) == {m: seen // 2 for m in M_VALUES}
    tiling_split.cache_clear()
    assert tiling_split() == expected


def test_split_pins_its_sizes() -> None:
    # Changing SPLIT_SEED or the catalogue changes these; every figure of the problem moves.
    split = tiling_split()
    sizes = [len(part) for part in (split.train, split.validation, split.seen_test)]
    assert sizes == [187, 408, 187]
    assert len(split.unseen_test) == 19 * 11
    assert Counter(s.regime for s in split.train) == {"decode": 34, "mid": 85, "prefill": 68}


def test_a_held_out_projection_with_a_seen_pair_is_refused() -> None:
    seen = [Projection("a.o", 4096, 4096)]
    with pytest.raises(GemmTilingError, match=r"\['b.o'\]"):
        split_projections(seen, [Projection("b.o", 4096, 4096)], seen_test_share=0.5, seed=0)


def test_probe_shapes_are_six_train_shapes_spanning_regimes_and_models() -> None:
    probes = probe_shapes()
    assert len(probes) == 6
    assert set(probes) <= set(train_shapes())
    assert {(s.regime, s.model) for s in probes} == {
        (regime, model) for regime in REGIMES for model in ("8B", "70B_tp8")
    }


def test_validation_shapes_are_every_seen_projection_between_the_grid_values() -> None:
    validation = validation_shapes()
    assert len(validation) == 34 * 12 == len(set(validation))
    assert pairs(validation) == pairs(train_shapes()) == pairs(seen_test_shapes())
    values = sorted({s.m for s in validation})
    assert values == list(shapes.VALIDATION_M_VALUES)
    # Each octave the grid skips below 16, then one token count between neighbouring grid values.
    assert [m for m in values if m < 16] == [2, 4, 8]
    for low, high in itertools.pairwise(M_VALUES[1:]):
        assert sum(low < m < high for m in values) == 1
    assert max(values) < max(M_VALUES)
    assert all(s.projection != "unseen" for s in validation)
