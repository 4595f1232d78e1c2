"""Built-in prices of a few hosted models, USD per 1M tokens (prompt, answer).

A model's own ``price_in`` / ``price_out`` in the job config wins; this table fills them in when
they are left out, and a model it does not know (a local vLLM or Ollama model) costs nothing.
Providers change prices: the figures are the list prices published when this table was written,
for standard (not batch, not cached) requests, and the config is the place to correct them.
"""

from __future__ import annotations

from codevolve.core.config import ModelConfig

PriceTable = dict[str, tuple[float, float]]  # model name -> (USD per 1M in, USD per 1M out)

PRICES: PriceTable = {
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
}

TOKENS_PER_MILLION = 1_000_000


def prices_of(model: ModelConfig, table: PriceTable | None = None) -> tuple[float, float]:
    """``(USD per 1M prompt tokens, USD per 1M answer tokens)`` of ``model``.

    The table is looked up by the exact name, then by the name less a provider prefix
    (``openai/gpt-4o-mini``, as LiteLLM and OpenRouter spell it).
    """
    table = PRICES if table is None else table
    listed = table.get(model.name) or table.get(model.name.rsplit("/", 1)[-1]) or (0.0, 0.0)
    price_in = listed[0] if model.price_in is None else model.price_in
    price_out = listed[1] if model.price_out is None else model.price_out
    return price_in, price_out


def cost_usd(model: ModelConfig, *, tokens_in: int, tokens_out: int) -> float:
    price_in, price_out = prices_of(model)
    return (tokens_in * price_in + tokens_out * price_out) / TOKENS_PER_MILLION
