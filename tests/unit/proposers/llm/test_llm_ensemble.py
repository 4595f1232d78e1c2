"""Pure parts of the LLM proposer: the config, prices, the breaker, the ensemble and its bandit,
Retry-After parsing and the CLI's model syntax."""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np
import pytest
from pydantic import ValidationError

from codevolve.core.config import ModelConfig, ProposerConfig, RunConfig
from codevolve.core.errors import ConfigError
from codevolve.proposers.llm.breaker import CircuitBreaker
from codevolve.proposers.llm.client import retry_after
from codevolve.proposers.llm.ensemble import Ensemble
from codevolve.proposers.llm.prices import cost_usd, prices_of
from codevolve.services.cli.llm import add_run_arguments, parse_model, proposer_overrides


def test_simulated_stays_the_default_and_logs_no_prompts() -> None:
    config = RunConfig(problem="gemm-tiling")
    assert config.proposer.kind == "simulated" and not config.proposer.logs_prompts


def test_an_llm_config_needs_distinct_models_and_round_trips_through_json() -> None:
    with pytest.raises(ValidationError, match="at least one model"):
        ProposerConfig(kind="llm")
    with pytest.raises(ValidationError, match="distinct"):
        ProposerConfig(kind="llm", models=(ModelConfig(name="a"), ModelConfig(name="a")))
    with pytest.raises(ValidationError):
        ProposerConfig(kind="llm", models=(ModelConfig(name="a", weight=0),))
    config = ProposerConfig(kind="llm", models=(ModelConfig(name="a"),), max_cost_usd=2.5)
    assert config.logs_prompts
    assert ProposerConfig.model_validate(config.model_dump(mode="json")) == config


def test_prices_come_from_the_config_then_the_table_else_zero() -> None:
    assert prices_of(ModelConfig(name="gpt-4o-mini")) == (0.15, 0.60)
    assert prices_of(ModelConfig(name="openai/gpt-4o-mini")) == (0.15, 0.60)
    assert prices_of(ModelConfig(name="gpt-4o-mini", price_in=1.0)) == (1.0, 0.60)
    assert prices_of(ModelConfig(name="qwen2.5-coder:7b")) == (0.0, 0.0)
    priced = ModelConfig(name="x", price_in=2.0, price_out=8.0)
    assert cost_usd(priced, tokens_in=1_000_000, tokens_out=500_000) == pytest.approx(6.0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_breaker_opens_after_consecutive_failures_and_a_trial_closes_it() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failures=3, cooldown_s=10.0, clock=clock)
    breaker.failure()
    breaker.failure()
    breaker.success()  # a success resets the count
    breaker.failure()
    breaker.failure()
    assert breaker.acquire()
    breaker.failure()
    assert breaker.is_open and not breaker.acquire() and breaker.wait_s() == 10.0
    clock.now += 10.0
    assert breaker.acquire()  # the trial
    assert not breaker.acquire()  # everyone else waits while it runs
    breaker.failure()  # the trial failed: paused again at once
    assert breaker.wait_s() == 10.0
    clock.now += 10.0
    assert breaker.acquire()
    breaker.success()
    assert not breaker.is_open and breaker.acquire()


def test_a_trial_that_never_reports_only_delays_the_next_one() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failures=1, cooldown_s=5.0, clock=clock)
    breaker.failure()
    clock.now += 5.0
    assert breaker.acquire()  # its proposal is then cancelled: no success, no failure
    clock.now += 5.0
    assert breaker.acquire()


def models(*weights: float, price: float | None = None) -> tuple[ModelConfig, ...]:
    return tuple(
        ModelConfig(name=f"m{i}", weight=w, price_in=price, price_out=price)
        for i, w in enumerate(weights)
    )


def picks(ensemble: Ensemble, n: int = 4000, available: list[str] | None = None) -> Counter[str]:
    rng = np.random.default_rng(1)
    return Counter(ensemble.choose(rng, available).name for _ in range(n))


def test_fixed_weights_set_how_often_each_model_is_asked() -> None:
    counts = picks(Ensemble(models(0.8, 0.2)))
    assert counts["m0"] / 4000 == pytest.approx(0.8, abs=0.03)
    assert picks(Ensemble(models(0.8, 0.2)), available=["m1"]) == Counter({"m1": 4000})


def test_the_bandit_shifts_weight_to_the_model_that_improves_more_per_dollar() -> None:
    ensemble = Ensemble(models(0.5, 0.5, price=1.0), adaptive=True)
    assert ensemble.probabilities() == {"m0": 0.5, "m1": 0.5}  # nothing learnt yet
    for _ in range(20):
        ensemble.observe("m0", cost_usd=0.01, improvement=0.0)
        ensemble.observe("m1", cost_usd=0.01, improvement=0.05)
    learned = ensemble.probabilities()
    assert learned["m1"] > 0.85
    assert learned["m0"] >= 0.05 * 0.5  # the explore share keeps it sampled


def test_the_bandit_weighs_cost_a_cheap_model_wins_at_equal_gains() -> None:
    ensemble = Ensemble(models(0.5, 0.5, price=1.0), adaptive=True)
    for _ in range(20):
        ensemble.observe("m0", cost_usd=0.001, improvement=0.01)
        ensemble.observe("m1", cost_usd=0.100, improvement=0.01)
    assert ensemble.probabilities()["m0"] > 0.8


def test_without_prices_the_bandit_counts_calls() -> None:
    ensemble = Ensemble(models(0.5, 0.5), adaptive=True)
    for _ in range(10):
        ensemble.observe("m0", cost_usd=0.0, improvement=0.02)
        ensemble.observe("m1", cost_usd=0.0, improvement=0.0)
    ensemble.observe("gone", cost_usd=1.0, improvement=1.0)  # unknown names are ignored
    assert ensemble.probabilities()["m0"] > 0.8


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after("3") == 3.0
    assert retry_after(" 0.5 ") == 0.5
    assert retry_after(None) is None and retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: no wait


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpt-4.1-mini", ("gpt-4.1-mini", 1.0)),
        ("gpt-4.1-mini:0.2", ("gpt-4.1-mini", 0.2)),
        ("qwen2.5-coder:7b", ("qwen2.5-coder:7b", 1.0)),
        ("llama3:8:3", ("llama3:8", 3.0)),
    ],
)
def test_model_weights_parse_only_when_numeric(text: str, expected: tuple[str, float]) -> None:
    assert parse_model(text) == expected


def run_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return parser.parse_args(list(argv))


def test_cli_options_make_a_validated_proposer_section() -> None:
    section = proposer_overrides(
        run_args(
            "--proposer", "llm", "--llm-url", "http://localhost:8000/v1",
            "--model", "fast:0.8", "--model", "strong:0.2", "--max-cost", "3",
            "--price", "strong=3,15", "--deadline-s", "60", "--adaptive",
        )
    )  # fmt: skip
    assert section is not None
    config = ProposerConfig.model_validate(section)
    assert [(m.name, m.weight) for m in config.models] == [("fast", 0.8), ("strong", 0.2)]
    assert config.models[1].price_in == 3.0 and config.models[1].price_out == 15.0
    assert config.models[0].base_url == "http://localhost:8000/v1"
    assert config.max_cost_usd == 3.0 and config.deadline_s == 60.0 and config.adaptive
    assert proposer_overrides(run_args()) is None


@pytest.mark.parametrize(
    "argv",
    [
        ("--proposer", "llm"),
        ("--model", "gpt-4o"),
        ("--proposer", "llm", "--model", "a", "--price", "b=1,2"),
        ("--proposer", "llm", "--model", "a", "--price", "a=1"),
    ],
)
def test_inconsistent_cli_options_are_refused(argv: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError):
        proposer_overrides(run_args(*argv))


def test_a_resumed_history_counts_like_the_calls_it_sums() -> None:
    one_by_one = Ensemble(models(0.5, 0.5, price=1.0), adaptive=True)
    at_once = Ensemble(models(0.5, 0.5, price=1.0), adaptive=True)
    for _ in range(5):
        one_by_one.observe("m0", cost_usd=0.01, improvement=0.02)
        one_by_one.observe("m1", cost_usd=0.02, improvement=0.0)
    at_once.observe("m0", cost_usd=0.05, improvement=0.10, calls=5)
    at_once.observe("m1", cost_usd=0.10, improvement=0.0, calls=5)
    assert at_once.probabilities() == pytest.approx(one_by_one.probabilities())
