"""The LLM proposer: a prompt goes to one model of the ensemble; its answer comes back as text.

The proposer never raises for a provider's failure: a deadline, a rate limit that outlasts the
retries, a refused request or a malformed response is a :class:`~codevolve.core.prompt.Proposal`
whose ``error`` holds the reason, recorded by the controller like any other failed proposal. The
answer's SEARCH/REPLACE blocks are applied (and their failures recorded) by the controller, the
same path the simulated proposer's answers take.
"""

from __future__ import annotations

import numpy as np

from codevolve.core.config import ProposerConfig
from codevolve.core.prompt import Prompt, Proposal
from codevolve.proposers.errors import ProposerError
from codevolve.proposers.llm.client import ChatClient, ChatFailure, Message
from codevolve.proposers.llm.ensemble import Ensemble
from codevolve.proposers.llm.prices import cost_usd

PREFIX = "llm:"  # a program's proposer is "llm:<model name>"
SYSTEM_PROMPT = (
    "You are an expert programmer improving a program by evolutionary search. You are shown the "
    "current program, how it was scored and where it falls short. Reply with the edit in exactly "
    "the format the user asks for; anything else cannot be applied."
)


class LlmProposer:
    """Asks one model of an ensemble per prompt; learns from outcomes when adaptive."""

    name = "llm"
    reads_prompt_text = True
    cpu_bound = False  # it waits on an API

    def __init__(self, config: ProposerConfig, client: ChatClient) -> None:
        if config.kind != "llm":
            raise ProposerError(f"an LLM proposer needs kind 'llm', got {config.kind!r}")
        self._config = config
        self._client = client
        self.ensemble = Ensemble(config.models, adaptive=config.adaptive)

    async def propose(self, prompt: Prompt, rng: np.random.Generator) -> Proposal:
        model = self.ensemble.choose(rng, self._available())
        messages: list[Message] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": prompt.text},
        ]
        result = await self._client.complete(model, messages, deadline_s=self._config.deadline_s)
        proposer = PREFIX + model.name
        if isinstance(result, ChatFailure):
            return Proposal(text="", proposer=proposer, error=result.reason)
        return Proposal(
            text=result.text,
            proposer=proposer,
            tokens_in=result.tokens_in,
            tokens_out=result.tokens_out,
            cost_usd=cost_usd(model, tokens_in=result.tokens_in, tokens_out=result.tokens_out),
            error=None,
        )

    def observe(
        self, proposer: str, *, cost_usd: float, improvement: float, calls: int = 1
    ) -> None:
        """What ``calls`` proposals of ``proposer`` ("llm:<model>") cost and gained; feeds the
        bandit."""
        if proposer.startswith(PREFIX):
            self.ensemble.observe(
                proposer.removeprefix(PREFIX),
                cost_usd=cost_usd,
                improvement=improvement,
                calls=calls,
            )

    def _available(self) -> list[str] | None:
        """Models whose breaker is closed; None (all, the client then waits) if every one is
        paused."""
        names = [m.name for m in self.ensemble.models if not self._client.breaker(m).is_open]
        return names or None
