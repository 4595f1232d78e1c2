"""OpenEvolve's ``llm`` settings in a folder's config.yaml reach the requests the LLM proposer
sends: temperature, max_tokens, the per-request timeout, retries and the key, checked on a
chat-completions server on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from codevolve.core.prompt import ProgramView
from codevolve.problems.openevolve import make_bundle
from codevolve.problems.openevolve.api_keys import SHARED_KEY_ENV
from codevolve.prompt_sampler.builder import build_prompt
from codevolve.services.run_config import bundle_run_config
from codevolve.services.runtime.llm import open_llm_proposer
from tests.llm_server import Reply, Request, Stall, completion, serve

KEY = "sk-from-config-0123456789"


def config_yaml(url: str, **llm: object) -> str:
    settings = "".join(f"  {name}: {value}\n" for name, value in llm.items())
    return f'llm:\n  api_base: "{url}"\n{settings}  models:\n    - name: "m"\n'


def prompt() -> object:
    return build_prompt(
        job_id="j",
        problem="toy",
        context="Make it better.",
        proposal_index=0,
        island=0,
        parent=ProgramView(id="p", source="x = 1\n", score=1.0),
        inspirations=(),
        best_cases={},
        rng=np.random.default_rng(0),
    )


async def propose(text: str) -> object:
    files = {"initial_program.py": b"x = 1\n", "evaluator.py": b"def evaluate(p): ...\n"}
    bundle = make_bundle({**files, "config.yaml": text.encode()})
    config, _ = bundle_run_config(bundle, {}, fields={"proposer": {"kind": "llm"}})
    async with open_llm_proposer(config) as proposer:
        return await proposer.propose(prompt(), np.random.default_rng(1))  # type: ignore[arg-type]


async def test_temperature_and_max_tokens_are_sent_as_configured() -> None:
    async with serve(lambda _r: completion("ok")) as server:
        proposal = await propose(config_yaml(server.url, temperature=0.15, max_tokens=777))
    assert proposal.error is None  # type: ignore[attr-defined]
    (request,) = server.requests
    assert (request.body["temperature"], request.body["max_tokens"]) == (0.15, 777)


async def test_a_request_past_the_timeout_is_abandoned_and_retried() -> None:
    answers: Iterator[Stall | Reply] = iter(
        [Stall(30.0, completion("too late")), completion("in time")]
    )

    def script(_request: Request) -> Stall | Reply:
        return next(answers)

    async with serve(script) as server:
        started = time.monotonic()
        text = config_yaml(server.url, timeout=0.5, retries=1, retry_delay=0.01)
        proposal = await propose(text)
        elapsed = time.monotonic() - started
    assert proposal.text == "in time"  # type: ignore[attr-defined]
    assert len(server.requests) == 2 and elapsed < 5  # the first stalled 30 s


async def test_retries_bound_the_requests_of_one_proposal() -> None:
    async with serve(lambda _r: Reply(500, "boom")) as server:
        proposal = await propose(config_yaml(server.url, retries=2, retry_delay=0.01))
    assert "HTTP 500" in (proposal.error or "")  # type: ignore[attr-defined]
    assert len(server.requests) == 3  # the first request and two retries


async def test_the_key_written_in_the_config_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    # The command line puts it there from the folder's config.yaml (Selection.api_keys).
    monkeypatch.setenv(SHARED_KEY_ENV, KEY)
    async with serve(lambda _r: completion("ok")) as server:
        await propose(config_yaml(server.url, api_key=f'"{KEY}"'))
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
