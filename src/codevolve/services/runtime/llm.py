"""Composition of the LLM proposer for a run: one HTTP client, one chat client, the ensemble.

The ``httpx.AsyncClient`` lives exactly as long as the run (closed on errors and cancellation
too); nothing is created at import.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import numpy as np

from codevolve.core.config import RunConfig
from codevolve.proposers.llm.client import ChatClient, RetryPolicy
from codevolve.proposers.llm.proposer import LlmProposer

CONNECT_TIMEOUT_S = 10.0  # seconds; a stalled read is bounded by the proposal's deadline
JITTER_STREAM = 0x6C6C6D  # keeps backoff jitter off the proposals' own random streams


@contextlib.asynccontextmanager
async def open_llm_proposer(config: RunConfig) -> AsyncIterator[LlmProposer]:
    proposer_config = config.proposer
    deadline = proposer_config.deadline_s
    connections = sum(model.max_concurrency for model in proposer_config.models)
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(deadline, connect=min(CONNECT_TIMEOUT_S, deadline)),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    ) as http:
        client = ChatClient(
            http,
            policy=RetryPolicy(
                max_attempts=proposer_config.max_attempts,
                backoff_s=proposer_config.backoff_s,
                breaker_failures=proposer_config.breaker_failures,
                breaker_cooldown_s=proposer_config.breaker_cooldown_s,
            ),
            rng=np.random.default_rng([config.seed, JITTER_STREAM]),
        )
        yield LlmProposer(proposer_config, client)
