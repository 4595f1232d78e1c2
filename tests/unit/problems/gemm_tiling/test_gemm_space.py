"""The gemm config space, its launch rule and the validation of untrusted answers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codevolve.problems.gemm_tiling.space import (
    MAX_SHARED_MEMORY_PER_BLOCK,
    SPACE_SIZE,
    ConfigArrays,
    GemmConfig,
    all_configs,
    config_index,
    config_space,
    launchable_configs,
    validate,
)


def test_space_has_6000_distinct_configs() -> None:
    assert len(all_configs()) == SPACE_SIZE == len(set(all_configs())) == len(config_space())


def test_launch_rule_admits_4026_configs() -> None:
    assert len(launchable_configs()) == 4026
    assert int(config_space().launchable.sum()) == 4026


def test_register_and_shared_memory_rules_alone_admit_4626_configs() -> None:
    # The warp clamp is what removes the other 600; this pins why the count is not 4626.
    space = config_space()
    registers = space.block_m * space.block_n // (32 * space.num_warps) + 40
    smem = 2 * space.num_stages * (space.block_m + space.block_n) * space.block_k
    assert int(((registers <= 255) & (smem <= MAX_SHARED_MEMORY_PER_BLOCK)).sum()) == 4626


def test_array_rule_agrees_with_the_scalar_rule_on_every_config() -> None:
    scalar = np.array([c.launchable for c in all_configs()])
    np.testing.assert_array_equal(scalar, config_space().launchable)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (GemmConfig(256, 128, 64, 4, 3, 8), "296 registers"),
        (GemmConfig(128, 256, 128, 8, 3, 8), "294912 B of shared memory"),
        (GemmConfig(16, 16, 64, 2, 3, 8), "2 warps for a 16x16 tile"),
    ],
)
def test_launch_problem_names_the_broken_rule(config: GemmConfig, reason: str) -> None:
    problem = config.launch_problem()
    assert problem is not None
    assert reason in problem


def test_big_tiles_launch_with_eight_warps() -> None:
    assert GemmConfig(256, 128, 64, 8, 4, 8).launchable
    assert GemmConfig(128, 256, 64, 8, 3, 1).launchable


def test_config_index_inverts_the_enumeration() -> None:
    configs = all_configs()
    for i in (0, 1, 1234, SPACE_SIZE - 1):
        assert config_index(configs[i]) == i


def test_config_arrays_of_configs_round_trip() -> None:
    configs = [GemmConfig(16, 32, 64, 1, 2, 4), GemmConfig(256, 128, 64, 4, 3, 8)]
    arrays = ConfigArrays.of(configs)
    assert arrays.block_n.tolist() == [32, 128]
    assert arrays.launchable.tolist() == [True, False]


def test_str_is_the_candidate_spelling() -> None:
    assert str(GemmConfig(64, 128, 64, 4, 3, 8)) == "GemmConfig(64, 128, 64, 4, 3, 8)"


@pytest.mark.parametrize("values", [[64, 128, 64, 4, 3, 8], (16, 16, 16, 1, 1, 1)])
def test_validate_accepts_six_ints_from_the_value_sets(values: object) -> None:
    assert isinstance(validate(values), GemmConfig)


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ([64, 128, 64, 4, 3], "expected 6 values"),
        ([64, 128, 64, 4, 3, 8, 1], "expected 6 values"),
        ({"block_m": 64}, "expected a list"),
        ("GemmConfig(64, 128, 64, 4, 3, 8)", "expected a list"),
        ([64, 128, 64, True, 3, 8], "num_warps must be an int, got bool"),
        ([64.0, 128, 64, 4, 3, 8], "block_m must be an int, got float"),
        ([64, 128, 64, 4, 3, 2], "group_m=2 is not one of"),
        ([512, 128, 64, 4, 3, 8], "block_m=512 is not one of"),
        ([64, 128, 64, 4, 0, 8], "num_stages=0 is not one of"),
    ],
)
def test_validate_explains_what_is_wrong(values: object, reason: str) -> None:
    result = validate(values)
    assert isinstance(result, str)
    assert reason in result


@given(st.lists(st.one_of(st.integers(-2, 300), st.booleans(), st.floats()), max_size=8))
def test_validate_returns_a_config_only_for_values_in_the_space(values: list[object]) -> None:
    result = validate(values)
    if isinstance(result, GemmConfig):
        assert result in set(all_configs())
        assert list(result.as_tuple()) == values
