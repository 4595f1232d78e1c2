"""The one map from what users type to RunConfig fields, shared by the command line and the API:
keys renamed, keys on top of fields, and refusals that name the key or option typed."""

from __future__ import annotations

import pytest

from codevolve.services.api.schemas import JobConfigIn
from codevolve.services.cli import _parser
from codevolve.services.cli.options import JOB_KEYS, config_error
from codevolve.services.run_config import (
    CAPS,
    FIELD_OF,
    NAMES,
    RunConfigRefused,
    run_config_of,
)

GEMM = {"problem": "gemm-tiling"}


def test_keys_become_their_fields_on_top_of_the_given_fields() -> None:
    config = run_config_of(
        {"proposals": 7, "in_flight": 3, "seed": 5},
        fields={**GEMM, "seed": 1, "max_proposals": 1000, "sandbox": {"wall_s": 4.0}},
    )
    assert (config.max_proposals, config.max_in_flight, config.seed) == (7, 3, 5)
    assert config.sandbox.wall_s == 4.0


def test_a_refused_key_is_named_as_each_front_end_names_it() -> None:
    with pytest.raises(RunConfigRefused) as refused:
        run_config_of({"proposals": 0, "in_flight": -1}, fields=GEMM)
    by_key = {r.key: r for r in refused.value.refusals}
    assert set(by_key) == {"proposals", "in_flight"}
    assert by_key["proposals"].option == "--proposals"
    assert by_key["in_flight"].option == "--in-flight"
    assert by_key["proposals"].requirement == "must be at least 1, got 0"
    line = str(config_error(refused.value))
    assert line == "--proposals must be at least 1, got 0; --in-flight must be at least 1, got -1"


def test_a_field_no_option_sets_is_named_after_where_it_came_from() -> None:
    with pytest.raises(RunConfigRefused) as refused:
        run_config_of({}, fields={**GEMM, "migrants": -1})
    (refusal,) = refused.value.refusals
    assert (refusal.key, refusal.option) == ("migrants", None)
    assert str(config_error(refused.value, other="--config")).startswith("--config migrants ")


def test_an_undeclared_key_is_a_bug_not_a_silent_default() -> None:
    with pytest.raises(KeyError):
        run_config_of({"proposal": 5}, fields=GEMM)


def test_every_api_key_is_in_the_one_map() -> None:
    assert set(JobConfigIn.model_fields) <= set(FIELD_OF)


def test_every_job_option_of_run_is_its_key_as_an_option() -> None:
    run = _parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    dests = {action.dest: action.option_strings for action in run._actions}
    for key in JOB_KEYS:
        option = NAMES[FIELD_OF[key]][1]
        assert option == "--" + key.replace("_", "-")
        assert dests[key] == [option]


def test_a_value_over_its_cap_is_refused_from_any_source() -> None:
    with pytest.raises(RunConfigRefused) as refused:
        run_config_of({"proposals": 10**20}, fields=GEMM)
    line = str(config_error(refused.value))
    assert line == f"--proposals must be at most 10000000, got {10**20}"
    with pytest.raises(RunConfigRefused) as refused:  # a field no option sets (--config JSON)
        run_config_of({}, fields={**GEMM, "max_code_length": 10**9})
    assert refused.value.refusals[0].requirement == f"must be at most {1 << 20}, got {10**9}"


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_capped_value_must_be_finite(value: float) -> None:
    with pytest.raises(RunConfigRefused) as refused:
        run_config_of({"max_wall_s": value}, fields=GEMM)
    assert str(config_error(refused.value)) == f"--max-wall-s must be a finite number, got {value}"


def test_the_api_schema_takes_its_caps_from_the_one_table() -> None:
    properties = JobConfigIn.model_json_schema()["properties"]
    for key in JobConfigIn.model_fields:
        assert properties[key]["maximum"] == CAPS[FIELD_OF[key]], key
