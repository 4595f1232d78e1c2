"""config.yaml of a bundle mapped onto the job's config: mapped keys, legacy keys, warnings for
every key that does not carry over, errors naming the key; and the fitness rule."""

from __future__ import annotations

import math

import pytest

from codevolve.problems.openevolve import Bundle, BundleError, fitness, make_bundle, read_config
from codevolve.services.run_config import bundle_run_config

CONFIG = """\
max_iterations: 250
random_seed: 11
max_code_length: 5000
checkpoint_interval: 10
mystery_top_level: true
llm:
  api_base: "http://localhost:9000/v1"
  primary_model: "fast"
  primary_model_weight: 0.8
  secondary_model: "strong"
  secondary_model_weight: 0.2
  temperature: 0.7
  top_p: 0.9
prompt:
  system_message: "Make it faster."
  num_top_programs: 4
  num_diverse_programs: 2
  fancy_prompt_option: 3
database:
  num_islands: 3
  migration_interval: 25
  migration_rate: 0.1
  exploitation_ratio: 0.6
  diversity_metric: "edit_distance"
  feature_dimensions: ["complexity", "diversity", "accuracy"]
  feature_bins: {complexity: 5, accuracy: 4}
evaluator:
  timeout: 30
  memory_limit_mb: 2048
  cascade_evaluation: true
  cascade_thresholds: [0.3, 0.6]
  parallel_evaluations: 4
"""
EVALUATOR = b"def evaluate_stage1(p): ...\ndef evaluate_stage2(p): ...\n"


def bundle(config: str) -> Bundle:
    return make_bundle(
        {
            "initial_program.py": b"x = 1\n",
            "evaluator.py": EVALUATOR,
            "config.yaml": config.encode(),
        }
    )


def test_mapped_keys_land_in_the_run_config() -> None:
    config, _ = bundle_run_config(bundle(CONFIG), {})
    assert config.problem.startswith("bundle:")
    assert (config.max_proposals, config.seed, config.max_code_length) == (250, 11, 5000)
    assert (config.top_inspirations, config.diverse_inspirations) == (4, 2)
    assert (config.islands, config.migration_interval, config.exploit_ratio) == (3, 25, 0.6)
    assert config.migrants == 20  # 10% of an island's 5 x 10 x 4 cells (diversity: 10)
    assert (config.sandbox.wall_s, config.sandbox.cpu_s, config.sandbox.memory_mb) == (30, 30, 2048)


def test_legacy_model_keys_become_the_ensemble() -> None:
    config, warnings = bundle_run_config(bundle(CONFIG), {})
    models = [(m.name, m.weight, m.base_url) for m in config.proposer.models]
    assert models == [
        ("fast", 0.8, "http://localhost:9000/v1"),
        ("strong", 0.2, "http://localhost:9000/v1"),
    ]
    assert config.proposer.kind == "simulated"  # the models wait for --proposer llm
    assert any(w.startswith("llm: models mapped") for w in warnings)


LLM_SETTINGS = """\
llm:
  api_base: "http://localhost:9000/v1"
  temperature: 0.3
  max_tokens: 2000
  timeout: 20
  retries: 2
  retry_delay: 1
  api_key: "sk-test-0123456789abcdef"
  models:
    - name: "fast"
      weight: 0.7
    - name: "strong"
      weight: 0.3
      temperature: 1.1
      api_key: "${STRONG_KEY}"
"""


def test_llm_settings_reach_every_model_and_the_retry_policy() -> None:
    config, warnings = bundle_run_config(bundle(LLM_SETTINGS), {})
    fast, strong = config.proposer.models
    assert (fast.temperature, fast.max_tokens, fast.timeout_s) == (0.3, 2000, 20)
    assert (strong.temperature, strong.max_tokens, strong.timeout_s) == (1.1, 2000, 20)
    assert (config.proposer.max_attempts, config.proposer.backoff_s) == (3, 1)
    assert config.proposer.deadline_s == 20 * 3 + 1 * (1 + 2)  # every attempt and its waits
    assert not [w for w in warnings if "ignored" in w]


def test_a_key_written_in_the_config_is_taken_out_of_the_bundle_and_named_by_a_variable() -> None:
    made = bundle(LLM_SETTINGS)
    assert "sk-test-0123456789abcdef" not in made.config_text
    assert "${CODEVOLVE_LLM_API_KEY}" in made.config_text
    config, _ = bundle_run_config(made, {})
    assert [m.api_key_env for m in config.proposer.models] == [
        "CODEVOLVE_LLM_API_KEY",
        "STRONG_KEY",  # ${VARIABLE} names where the key is, as in OpenEvolve
    ]
    assert "sk-test" not in config.model_dump_json()


def test_a_config_without_a_key_keeps_the_environment_default() -> None:
    config, _ = bundle_run_config(bundle("llm:\n  models: [{name: m}]\n"), {})
    assert config.proposer.models[0].api_key_env == "OPENAI_API_KEY"
    assert config.proposer.models[0].timeout_s is None


def test_unknown_and_unused_keys_are_warned_never_dropped_silently() -> None:
    warnings = read_config(CONFIG).warnings
    assert "mystery_top_level: unknown key; ignored" in warnings
    assert "prompt.fancy_prompt_option: unknown key; ignored" in warnings
    for recognised in ("checkpoint_interval", "llm.top_p", "database.diversity_metric"):
        assert f"{recognised}: recognised but has no effect here; ignored" in warnings
    assert not any("not supported" in w for w in warnings)
    score = read_config("database:\n  feature_dimensions: [score, complexity]\n")
    assert any("'score' is not supported" in w for w in score.warnings)


def test_problem_settings_shape_the_cascade_and_features() -> None:
    settings = read_config(CONFIG)
    assert settings.thresholds == (0.3, 0.6)
    assert not settings.thresholds_reject  # OpenEvolve's cascade: a threshold only stops it
    assert read_config("evaluator:\n  cascade_thresholds_reject: true\n").thresholds_reject
    assert settings.system_message == "Make it faster."
    specs = settings.features(initial_length=100)
    names = [(s.name, s.bins) for s in specs]
    assert names == [("complexity", 5), ("diversity", 10), ("accuracy", 4)]
    assert (specs[0].low, specs[2].low, specs[2].high) == (50.0, 0.0, 1.0)
    assert (specs[1].low, specs[1].high) == (0.0, 1.0)


def test_archive_size_raises_the_bins_as_in_openevolve() -> None:
    text = "database:\n  archive_size: 400\n  feature_bins: 4\n"
    assert [s.bins for s in read_config(text).features(initial_length=10)] == [20, 20]
    small = "database:\n  archive_size: 9\n  feature_bins: 4\n"
    assert [s.bins for s in read_config(small).features(initial_length=10)] == [4, 4]


def test_command_line_options_override_the_config() -> None:
    config, _ = bundle_run_config(
        bundle(CONFIG),
        {"proposals": 9},
        fields={"sandbox": {"wall_s": 5.0}, "proposer": {"kind": "llm"}},
    )
    assert config.max_proposals == 9
    assert (config.sandbox.wall_s, config.sandbox.cpu_s) == (5.0, 30.0)
    assert config.proposer.kind == "llm" and len(config.proposer.models) == 2


def test_an_empty_or_missing_config_gives_the_defaults() -> None:
    settings = read_config("")
    assert settings.run_fields == {} and settings.warnings == ()
    features = settings.features(initial_length=10)
    assert [(s.name, s.bins) for s in features] == [("complexity", 10), ("diversity", 10)]


@pytest.mark.parametrize(
    ("text", "at_fault"),
    [
        ("max_iterations: many\n", "max_iterations must be a number"),
        ("max_iterations: 2.5\n", "max_iterations must be a whole number"),
        ("- a list\n", "the top level must be a mapping"),
        ("evaluator: [1]\n", "evaluator must be a mapping"),
        ("evaluator:\n  cascade_thresholds: 0.5\n", "evaluator.cascade_thresholds must be"),
        (
            "evaluator:\n  cascade_thresholds_reject: 'yes'\n",
            "evaluator.cascade_thresholds_reject must be true or false, not 'yes'$",
        ),
        ("llm:\n  models: [{weight: 1}]\n", r"llm.models\[0\] needs a name"),
        ("key: [unclosed\n", "not valid YAML"),
        ("max_iterations: .nan\n", "max_iterations must be a finite number, got nan$"),
        (
            "database:\n  exploitation_ratio: -.inf\n",
            "database.exploitation_ratio must be a finite number, got -inf$",
        ),
    ],
)
def test_malformed_configs_name_the_key(text: str, at_fault: str) -> None:
    with pytest.raises(BundleError, match=f"^config.yaml: {at_fault}"):
        read_config(text)


def test_an_llm_value_the_run_config_refuses_names_the_llm_key() -> None:
    text = "llm:\n  temperature: 5\n  models: [{name: m}]\n"
    with pytest.raises(BundleError, match=r"llm\.temperature must be at most 2"):
        bundle_run_config(bundle(text), {})
    with pytest.raises(BundleError, match=r"llm\.retries must be at most 20"):
        bundle_run_config(bundle("llm:\n  retries: 40\n"), {})


def test_a_value_the_run_config_refuses_names_the_config_key() -> None:
    with pytest.raises(
        BundleError, match=r"^config\.yaml: max_iterations must be at least 1, got 0$"
    ):
        bundle_run_config(bundle("max_iterations: 0\n"), {})
    with pytest.raises(BundleError, match=r"evaluator\.timeout"):
        bundle_run_config(bundle("evaluator:\n  timeout: -1\n"), {})


def test_fitness_is_combined_score_when_present() -> None:
    assert fitness({"combined_score": 0.25, "accuracy": 1.0}) == 0.25


def test_fitness_is_else_the_mean_of_plain_numeric_metrics() -> None:
    metrics = {
        "a": 1.0,
        "b": 3.0,
        "passed": True,  # booleans are left out
        "bad": math.nan,  # so is NaN
        "error": "text metric",  # and text
        "accuracy": 100.0,  # and feature dimensions
    }
    assert fitness(metrics, features=("accuracy",)) == 2.0


def test_fitness_of_a_nan_combined_score_falls_back_and_of_nothing_is_none() -> None:
    assert fitness({"combined_score": math.nan, "a": 4.0}) == 4.0
    assert fitness({"error": "boom", "ok": False}) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "max_iterations: 99999999999999999999\n",
            "max_iterations must be at most 10000000, got 99999999999999999999",
        ),
        ("random_seed: 1.0e+30\n", "random_seed must be at most 4294967295, got 10"),
        ("database:\n  num_islands: 100000\n", "database.num_islands must be at most 256, got"),
        ("max_code_length: 1.0e+12\n", "max_code_length must be at most 1048576, got"),
    ],
)
def test_config_yaml_is_held_to_the_caps_of_every_source(text: str, message: str) -> None:
    with pytest.raises(BundleError, match=f"^config.yaml: {message}"):
        bundle_run_config(bundle(text), {})


def test_parallel_evaluations_and_similarity_threshold_are_mapped() -> None:
    text = "evaluator:\n  parallel_evaluations: 4\ndatabase:\n  similarity_threshold: 0.95\n"
    settings = read_config(text)
    assert settings.parallel_evaluations == 4 and not settings.warnings
    config, _ = bundle_run_config(bundle(text), {})
    assert config.novelty_threshold == 0.95
    with pytest.raises(BundleError, match=r"database\.similarity_threshold must be at most 1"):
        bundle_run_config(bundle("database:\n  similarity_threshold: 2\n"), {})
