"""Command-line options of the LLM proposer, and the proposal shown by ``codevolve show``.

codevolve run gemm-tiling --proposer llm --llm-url http://localhost:8000/v1 \\
    --model Qwen/Qwen2.5-Coder-7B-Instruct:0.8 --model gpt-4.1-mini:0.2 --max-cost 5

``--model NAME[:WEIGHT]`` takes the weight from the last ``:`` only when it is a number, so
Ollama tags such as ``qwen2.5-coder:7b`` stay whole (write ``llama3:8:1`` for a tag that is a
number).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from codevolve.core.config import ProposerConfig
from codevolve.core.errors import ConfigError

DEFAULT_URL = "https://api.openai.com/v1"


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    group = run.add_argument_group("proposer")
    group.add_argument(
        "--proposer", choices=["simulated", "llm"], default=None, help="default: simulated"
    )
    group.add_argument("--llm-url", default=DEFAULT_URL, help=f"endpoint root ({DEFAULT_URL})")
    group.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME[:WEIGHT]",
        help="a model of the ensemble, repeatable; weight 1 unless given",
    )
    group.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="environment variable holding the API key ('' for none)",
    )
    group.add_argument("--max-cost", type=float, default=None, metavar="USD", help="cost budget")
    group.add_argument("--deadline-s", type=float, default=None, help="limit per proposal, s")
    group.add_argument("--temperature", type=float, default=None)
    group.add_argument("--max-tokens", type=int, default=None, help="longest answer, tokens")
    group.add_argument("--llm-concurrency", type=int, default=None, help="requests per model")
    group.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="NAME=IN,OUT",
        help="USD per 1M prompt and answer tokens of a model (default: built-in table, else 0)",
    )
    group.add_argument(
        "--adaptive", action="store_true", help="favour models and prompt styles that improve"
    )


def proposer_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``proposer`` section of the run config the options ask for (None: the default)."""
    if args.proposer != "llm":
        if args.model or args.max_cost is not None:
            raise ConfigError("--model and --max-cost need --proposer llm")
        return None
    if not args.model:
        raise ConfigError("--proposer llm needs at least one --model NAME[:WEIGHT]")
    prices = dict(_price(text) for text in args.price)
    models = []
    for text in args.model:
        name, weight = parse_model(text)
        model: dict[str, Any] = {
            "name": name,
            "weight": weight,
            "base_url": args.llm_url,
            "api_key_env": args.api_key_env or None,
        }
        for key, value in (
            ("temperature", args.temperature),
            ("max_tokens", args.max_tokens),
            ("max_concurrency", args.llm_concurrency),
        ):
            if value is not None:
                model[key] = value
        if name in prices:
            model["price_in"], model["price_out"] = prices.pop(name)
        models.append(model)
    if prices:
        raise ConfigError(f"--price names models not in --model: {sorted(prices)}")
    section: dict[str, Any] = {"kind": "llm", "models": models, "adaptive": args.adaptive}
    if args.max_cost is not None:
        section["max_cost_usd"] = args.max_cost
    if args.deadline_s is not None:
        section["deadline_s"] = args.deadline_s
    return ProposerConfig.model_validate(section).model_dump(mode="json")


def parse_model(text: str) -> tuple[str, float]:
    """``"NAME[:WEIGHT]"`` -> ``(name, weight)``; the weight defaults to 1."""
    name, _, suffix = text.rpartition(":")
    if name:
        try:
            return name, float(suffix)
        except ValueError:
            pass
    if not text:
        raise ConfigError("--model needs a name")
    return text, 1.0


def _price(text: str) -> tuple[str, tuple[float, float]]:
    name, _, prices = text.rpartition("=")
    try:
        price_in, price_out = (float(part) for part in prices.split(","))
    except ValueError:
        raise ConfigError(f"--price {text!r}: expected NAME=IN,OUT (USD per 1M tokens)") from None
    if not name:
        raise ConfigError(f"--price {text!r}: expected NAME=IN,OUT (USD per 1M tokens)")
    return name, (price_in, price_out)


def add_show_arguments(show: argparse.ArgumentParser) -> None:
    show.add_argument(
        "--prompt", action="store_true", help="also print the prompt and the answer (if logged)"
    )


def print_proposal(console: Console, proposal: dict[str, Any] | None, *, texts: bool) -> None:
    """The proposal that made a program: who, tokens, cost, prompt variant; texts on request."""
    if proposal is None:
        return
    table = Table(title=f"proposal {proposal['index']}", show_header=False)
    for key in ("proposer", "prompt_variant", "tokens_in", "tokens_out"):
        table.add_row(key, str(proposal[key]))
    table.add_row("cost_usd", f"{proposal['cost_usd']:.6f}")
    console.print(table)
    if texts:
        for key in ("prompt", "answer"):
            console.rule(key)
            console.print(proposal[key] or "(not logged)", markup=False, highlight=False)


def print_usage(console: Console, report: dict[str, Any]) -> None:
    """Tokens and cost of a run, per model; nothing for a run that used no tokens."""
    if not report.get("tokens_in") and not report.get("tokens_out"):
        return
    budget = report.get("max_cost_usd")
    limit = f" of a {budget:g} USD budget" if budget else ""
    console.print(
        f"tokens: {report['tokens_in']} in, {report['tokens_out']} out; "
        f"cost {report['cost_usd']:.4f} USD{limit}"
    )
    for proposer, usage in report.get("by_proposer", {}).items():
        console.print(
            f"  {proposer}: {usage['proposals']} proposals, {usage['improved']} improved, "
            f"{usage['cost_usd']:.4f} USD"
        )
