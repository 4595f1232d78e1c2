"""Job configuration: frozen, validated, documented field by field, stored with the job.

Config never holds live objects; composition roots turn it into engines, queues and clients.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SandboxLimits(_Frozen):
    """Resource limits for one sandboxed call of a candidate."""

    wall_s: float = Field(10.0, gt=0, le=3600, description="wall-clock limit, seconds")
    cpu_s: float = Field(10.0, gt=0, le=3600, description="CPU-time limit, seconds")
    memory_mb: int = Field(1024, ge=64, le=1 << 20, description="address-space limit, MiB")
    output_bytes: int = Field(
        65536, ge=1024, le=1 << 26, description="stdout/stderr kept per call, bytes"
    )


class ModelConfig(_Frozen):
    """One model of an LLM ensemble, served by an OpenAI-compatible chat-completions endpoint.

    The API key is never stored: ``api_key_env`` names the environment variable that holds it.
    """

    name: str = Field(min_length=1, max_length=190, description="model name sent to the endpoint")
    weight: float = Field(1.0, gt=0, description="relative probability of asking this model")
    base_url: str = Field(
        "https://api.openai.com/v1",
        min_length=1,
        description="endpoint root; '/chat/completions' is appended",
    )
    api_key_env: str | None = Field(
        "OPENAI_API_KEY", description="environment variable holding the API key (None: no key)"
    )
    temperature: float = Field(0.8, ge=0, le=2, description="sampling temperature")
    max_tokens: int = Field(4096, ge=16, le=1 << 20, description="longest answer, tokens")
    timeout_s: float | None = Field(
        None, gt=0, le=3600, description="one request's limit, seconds (None: the proposal's)"
    )
    price_in: float | None = Field(
        None, ge=0, description="USD per 1M prompt tokens (None: the built-in price table, else 0)"
    )
    price_out: float | None = Field(
        None, ge=0, description="USD per 1M answer tokens (None: the built-in price table, else 0)"
    )
    max_concurrency: int = Field(8, ge=1, le=1024, description="requests to this model at once")


class ProposerConfig(_Frozen):
    """Which proposer makes the diffs. ``simulated`` (the default) needs no network; ``llm`` asks
    the ``models`` ensemble."""

    kind: Literal["simulated", "llm"] = "simulated"
    domain_weight: float = Field(
        0.85, ge=0, le=1, description="simulated: chance of a domain mutation over a generic one"
    )
    models: tuple[ModelConfig, ...] = Field((), description="llm: the ensemble, at least one model")
    deadline_s: float = Field(
        180.0, gt=0, le=3600, description="llm: hard limit per proposal, all retries included, s"
    )
    max_attempts: int = Field(4, ge=1, le=20, description="llm: requests per proposal at most")
    backoff_s: float = Field(
        1.0, gt=0, le=60, description="llm: first retry delay, doubled per retry, with jitter, s"
    )
    breaker_failures: int = Field(
        5, ge=1, description="llm: consecutive failed requests that pause a model"
    )
    breaker_cooldown_s: float = Field(
        30.0, gt=0, description="llm: how long a paused model is left alone, s"
    )
    adaptive: bool = Field(
        False, description="llm: shift weight toward models whose children improve most per cost"
    )
    max_cost_usd: float | None = Field(
        None, gt=0, description="budget: stop proposing once the job's proposals cost this, USD"
    )
    log_prompts: bool | None = Field(
        None, description="store each prompt and answer with its proposal (None: for llm only)"
    )

    @model_validator(mode="after")
    def _check(self) -> ProposerConfig:
        if self.kind == "llm" and not self.models:
            raise ValueError("the llm proposer needs at least one model")
        names = [model.name for model in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be distinct, got {names}")
        return self

    @property
    def logs_prompts(self) -> bool:
        return self.kind == "llm" if self.log_prompts is None else self.log_prompts


class RunConfig(_Frozen):
    """Everything that defines one evolution run of one problem."""

    problem: str = Field(description="registered problem name, e.g. 'gemm-tiling'")
    label: str | None = Field(
        None,
        max_length=200,
        description="what the user named the problem by, shown instead of a bundle's "
        "'bundle:<sha256>': the folder (with its config file when not config.yaml) or the file",
    )
    seed: int = Field(0, ge=0, description="seed of every random choice of the run")
    max_proposals: int = Field(1000, ge=1, description="budget: proposals made (applied or not)")
    max_wall_s: float | None = Field(None, gt=0, description="budget: wall-clock seconds")
    islands: int = Field(
        1,
        ge=1,
        le=256,
        description="independent sub-populations; they pay off on long runs (on gemm-tiling with "
        "1000 proposals one island measured best)",
    )
    max_in_flight: int = Field(
        8, ge=1, le=4096, description="proposals being proposed or evaluated at once"
    )
    # Defaults measured on gemm-tiling, selection on train + validation shapes, 1000 proposals
    # (docs/gemm_tiling.md, "Parent choice"): greedier than 0.7 / 4.0, which stalled some seeds.
    exploit_ratio: float = Field(
        0.8, ge=0, le=1, description="probability of sampling a parent by rank instead of uniformly"
    )
    rank_temperature: float = Field(
        1.0, gt=0, description="exploit sampling weight of the elite of rank r is exp(-r/temp)"
    )
    top_inspirations: int = Field(2, ge=0, le=32, description="best elites shown beside the parent")
    diverse_inspirations: int = Field(
        1, ge=0, le=32, description="random elites of other cells shown beside the parent"
    )
    migration_interval: int = Field(
        100, ge=0, description="proposals between migrations (0 disables migration)"
    )
    migrants: int = Field(1, ge=0, description="best elites each island sends to the next one")
    reset_interval: int = Field(
        0, ge=0, description="proposals between resets of the worse half of islands (0: never)"
    )
    max_code_length: int = Field(20000, ge=100, description="longest child accepted, characters")
    novelty_threshold: float | None = Field(
        None,
        gt=0,
        le=1,
        description="a child this similar (core.similarity) to its parent or an inspiration of "
        "its prompt is not evaluated (None: every child is)",
    )
    remeasure_samples: int = Field(
        5,
        ge=1,
        le=100,
        description="independent samples (fresh seeds) a would-be best is re-measured on before "
        "it becomes the job's best; they are evaluations, not proposals",
    )
    sandbox: SandboxLimits = SandboxLimits()
    proposer: ProposerConfig = ProposerConfig()

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if self.reset_interval and self.islands < 2:
            raise ValueError("reset_interval needs at least 2 islands")
        return self
