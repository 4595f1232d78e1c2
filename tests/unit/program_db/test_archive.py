"""The pure MAP-Elites and island logic: cells, sampling, inspirations, migration, resets."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codevolve.core.problem import FeatureSpec
from codevolve.program_db.archive import (
    EliteRef,
    by_rank,
    cell_from_text,
    cell_key,
    cell_to_text,
    choose_inspirations,
    choose_parent,
    islands_to_reset,
    migration_plan,
    rank_weights,
)
from codevolve.program_db.errors import ProgramDbError

NAMES = ["size", "speed", "depth"]
any_float = st.floats(allow_nan=True, allow_infinity=True)
specs = st.lists(
    st.builds(
        FeatureSpec,
        name=st.sampled_from(NAMES),
        low=st.floats(-1e6, 1e6),
        high=st.floats(-1e6, 1e6),
        bins=st.integers(1, 20),
    ),
    max_size=3,
)
features = st.dictionaries(st.sampled_from(NAMES), any_float)
seeds = st.integers(0, 2**32 - 1)


@st.composite
def elite_sets(draw: st.DrawFn, min_size: int = 1) -> list[EliteRef]:
    cells = draw(
        st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=min_size, unique=True)
    )
    scores = draw(
        st.lists(st.sampled_from([0.0, 1.0, 2.5]) | st.floats(-100, 100), min_size=len(cells),
                 max_size=len(cells))
    )  # fmt: skip
    return [
        EliteRef(cell=c, program_id=f"p{c[0]}{c[1]}", score=s)
        for c, s in zip(cells, scores, strict=True)
    ]


# ----------------------------------------------------------------------------------------- cells


@given(features, specs)
def test_cell_keys_are_total_and_in_range(
    values: dict[str, float], spec_list: list[FeatureSpec]
) -> None:
    key = cell_key(values, spec_list)
    assert len(key) == len(spec_list)
    assert all(0 <= index < spec.bins for index, spec in zip(key, spec_list, strict=True))


def test_cell_keys_cut_the_range_into_equal_bins_and_clamp_outside() -> None:
    spec = [FeatureSpec("size", low=0.0, high=1.0, bins=4)]
    assert [cell_key({"size": v}, spec) for v in (0.0, 0.24, 0.25, 0.6, 0.99, 1.0)] == [
        (0,), (0,), (1,), (2,), (3,), (3,),
    ]  # fmt: skip
    assert [cell_key({"size": v}, spec) for v in (-5.0, 7.0, math.inf, -math.inf)] == [
        (0,), (3,), (3,), (0,),
    ]  # fmt: skip
    assert cell_key({"size": math.nan}, spec) == (0,)
    assert cell_key({}, spec) == (0,)


@given(st.lists(st.integers(0, 10_000), max_size=5).map(tuple))
def test_cell_text_round_trips(cell: tuple[int, ...]) -> None:
    assert cell_from_text(cell_to_text(cell)) == cell


def test_a_malformed_cell_text_is_an_error() -> None:
    with pytest.raises(ProgramDbError):
        cell_from_text("3,x")


# -------------------------------------------------------------------------------------- sampling


@given(st.integers(0, 500), st.floats(1e-3, 1e3))
def test_rank_weights_sum_to_one_and_never_increase(n: int, temperature: float) -> None:
    weights = rank_weights(n, temperature)
    assert weights.shape == (n,)
    if n:
        assert math.isclose(float(weights.sum()), 1.0, rel_tol=1e-9)
        assert np.all(np.diff(weights) <= 0)
        assert np.all(weights >= 0)


def test_rank_weights_need_a_positive_temperature() -> None:
    with pytest.raises(ProgramDbError):
        rank_weights(3, 0.0)


@given(elite_sets(), seeds, st.floats(0, 1), st.floats(1e-2, 1e2))
def test_choose_parent_returns_a_member(
    elites: list[EliteRef], seed: int, exploit_ratio: float, temperature: float
) -> None:
    parent = choose_parent(
        elites, np.random.default_rng(seed), exploit_ratio=exploit_ratio, temperature=temperature
    )
    assert parent in elites


@given(elite_sets(), seeds, st.floats(0, 1), st.floats(1e-2, 1e2))
def test_choose_parent_draws_as_numpy_choice_with_the_rank_weights(
    elites: list[EliteRef], seed: int, exploit_ratio: float, temperature: float
) -> None:
    """The exploit draw replaces ``rng.choice(n, p=weights)``: same parent, same stream after."""
    ranked = by_rank(elites)
    reference = np.random.default_rng(seed)
    if reference.random() < exploit_ratio:
        expected = ranked[
            int(reference.choice(len(ranked), p=rank_weights(len(ranked), temperature)))
        ]
    else:
        expected = ranked[int(reference.integers(len(ranked)))]
    rng = np.random.default_rng(seed)
    parent = choose_parent(elites, rng, exploit_ratio=exploit_ratio, temperature=temperature)
    assert parent == expected
    assert rng.random() == reference.random()


def test_choose_parent_from_nothing_is_an_error() -> None:
    with pytest.raises(ProgramDbError):
        choose_parent([], np.random.default_rng(0), exploit_ratio=0.5, temperature=1.0)


def test_exploit_sampling_follows_the_rank_weights() -> None:
    elites = [EliteRef(cell=(i,), program_id=f"p{i}", score=float(i)) for i in range(6)]
    rng = np.random.default_rng(11)
    draws = 8_000
    counts = np.zeros(6)
    for _ in range(draws):
        parent = choose_parent(elites, rng, exploit_ratio=1.0, temperature=2.0)
        counts[5 - parent.cell[0]] += 1  # rank 0 is the best score, 5
    expected = rank_weights(6, 2.0)
    assert np.allclose(counts / draws, expected, atol=0.02)


def test_explore_sampling_is_uniform_over_cells() -> None:
    elites = [EliteRef(cell=(i,), program_id=f"p{i}", score=float(i)) for i in range(5)]
    rng = np.random.default_rng(12)
    draws = 8_000
    counts = np.zeros(5)
    for _ in range(draws):
        counts[choose_parent(elites, rng, exploit_ratio=0.0, temperature=0.1).cell[0]] += 1
    assert np.allclose(counts / draws, 0.2, atol=0.02)


@given(elite_sets(), seeds, st.integers(0, 5), st.integers(0, 5))
def test_inspirations_exclude_the_parent_and_repeat_nothing(
    elites: list[EliteRef], seed: int, top: int, diverse: int
) -> None:
    rng = np.random.default_rng(seed)
    parent = elites[int(rng.integers(len(elites)))]
    chosen = choose_inspirations(elites, parent, rng, top=top, diverse=diverse)
    ids = [e.program_id for e in chosen]
    assert parent.program_id not in ids
    assert len(ids) == len(set(ids))
    assert all(e in elites for e in chosen)
    others = by_rank([e for e in elites if e.program_id != parent.program_id])
    assert len(chosen) == min(top + diverse, len(others))
    assert chosen[:top] == others[:top]  # the best come first


@given(elite_sets(), seeds, st.integers(0, 5), st.integers(1, 3))
def test_inspirations_draw_as_numpy_choice_without_replacement(
    elites: list[EliteRef], seed: int, top: int, diverse: int
) -> None:
    """The diverse draw replaces ``rng.choice(n, size=k, replace=False)`` (one bounded integer
    when k is 1): the same inspirations, the same stream after."""
    parent = by_rank(elites)[0]
    others = by_rank([e for e in elites if e.program_id != parent.program_id])
    best, rest = others[:top], others[top:]
    reference = np.random.default_rng(seed)
    count = min(diverse, len(rest))
    picked = reference.choice(len(rest), size=count, replace=False) if count else []
    rng = np.random.default_rng(seed)
    chosen = choose_inspirations(elites, parent, rng, top=top, diverse=diverse)
    assert chosen == best + [rest[int(i)] for i in picked]
    assert rng.random() == reference.random()


# ---------------------------------------------------------------------------- migration, resets


@given(st.dictionaries(st.integers(0, 7), elite_sets(min_size=0), max_size=6), st.integers(0, 3))
def test_migration_follows_the_ring_and_sends_each_islands_best(
    per_island: dict[int, list[EliteRef]], migrants: int
) -> None:
    plan = migration_plan(per_island, migrants=migrants)
    islands = sorted(per_island)
    if len(islands) < 2:
        assert plan == []
        return
    following = {island: islands[(k + 1) % len(islands)] for k, island in enumerate(islands)}
    for source, destination, elite in plan:
        assert destination == following[source] and destination != source
        assert elite in by_rank(per_island[source])[:migrants]
    assert len(plan) == sum(min(migrants, len(elites)) for elites in per_island.values())


def test_migration_of_three_islands_is_a_ring() -> None:
    best = {i: [EliteRef(cell=(i,), program_id=f"p{i}", score=float(i))] for i in range(3)}
    plan = migration_plan(best, migrants=1)
    assert [(s, d) for s, d, _ in plan] == [(0, 1), (1, 2), (2, 0)]


island_scores = st.dictionaries(
    st.integers(0, 15), st.none() | st.sampled_from([0.0, 1.0]) | st.floats(-10, 10), max_size=12
)


@given(island_scores, seeds)
def test_reset_plan_resets_at_most_half_and_never_a_donor(
    scores: dict[int, float | None], seed: int
) -> None:
    reset, donors = islands_to_reset(scores, np.random.default_rng(seed))
    assert len(reset) <= len(scores) // 2
    assert len(donors) == len(reset) and len(set(reset)) == len(reset)
    assert not set(donors) & set(reset)
    assert all(scores[d] is not None for d in donors)
    survivors = set(scores) - set(reset)

    def rank(score: float | None) -> float:
        return -math.inf if score is None else score

    assert all(rank(scores[r]) <= rank(scores[s]) for r in reset for s in survivors)


def test_reset_plan_breaks_ties_at_random() -> None:
    scores: dict[int, float | None] = dict.fromkeys(range(4), 1.0)
    plans = {
        tuple(sorted(islands_to_reset(scores, np.random.default_rng(s))[0])) for s in range(40)
    }
    assert len(plans) > 1


def test_nothing_is_reset_while_no_island_has_an_elite() -> None:
    assert islands_to_reset(dict.fromkeys(range(4)), np.random.default_rng(0)) == ([], [])
