"""The chat-completions client against a protocol-compatible server on loopback: good answers,
garbage, 429 with Retry-After, 5xx, stalls past the deadline, dropped connections, pauses."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable

import httpx
import numpy as np
import pytest

from codevolve.core.config import ModelConfig
from codevolve.proposers.llm.client import ChatClient, ChatFailure, Completion, RetryPolicy
from tests.llm_server import Action, Drop, Reply, Request, Stall, completion, serve

MESSAGES = [{"role": "user", "content": "improve this"}]
FAST = RetryPolicy(max_attempts=3, backoff_s=0.01, breaker_failures=50, breaker_cooldown_s=1.0)


def model(url: str, **overrides: object) -> ModelConfig:
    values: dict[str, object] = {"name": "m", "base_url": url, "api_key_env": "CV_TEST_KEY"}
    return ModelConfig.model_validate(values | overrides)


def sequence(*actions: Action) -> Callable[[Request], Action]:
    """Answer the i-th request with the i-th action (the last one repeats)."""
    counter = itertools.count()

    def script(_request: Request) -> Action:
        return actions[min(next(counter), len(actions) - 1)]

    return script


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30.0) as client:
        yield client


def client_of(http: httpx.AsyncClient, policy: RetryPolicy = FAST) -> ChatClient:
    return ChatClient(
        http, policy=policy, rng=np.random.default_rng(0), env={"CV_TEST_KEY": "sk-test"}
    )


async def test_a_good_answer_brings_its_text_and_token_counts(http: httpx.AsyncClient) -> None:
    async with serve(sequence(completion("the answer", tokens_in=321, tokens_out=45))) as server:
        result = await client_of(http).complete(
            model(server.url, temperature=0.3, max_tokens=999), MESSAGES, deadline_s=5
        )
    assert result == Completion("the answer", 321, 45, attempts=1, finish_reason="stop")
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body == {
        "model": "m",
        "messages": MESSAGES,
        "temperature": 0.3,
        "max_tokens": 999,
    }


async def test_missing_usage_is_estimated_from_the_text(http: httpx.AsyncClient) -> None:
    body = {"choices": [{"message": {"content": "x" * 400}}]}
    async with serve(sequence(Reply(body=body))) as server:
        result = await client_of(http).complete(model(server.url), MESSAGES, deadline_s=5)
    assert isinstance(result, Completion)
    assert result.tokens_out == 100 and result.tokens_in > 0


async def test_429_waits_at_least_retry_after_then_succeeds(http: httpx.AsyncClient) -> None:
    limited = Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "1"})
    async with serve(sequence(limited, completion("ok"))) as server:
        result = await client_of(http).complete(model(server.url), MESSAGES, deadline_s=5)
    assert isinstance(result, Completion) and result.attempts == 2
    first, second = server.requests
    assert second.received_at - first.received_at >= 1.0


async def test_retry_after_beyond_the_deadline_fails_at_once(http: httpx.AsyncClient) -> None:
    limited = Reply(429, "rate limited", {"Retry-After": "120"})
    async with serve(sequence(limited, completion("never asked"))) as server:
        started = time.monotonic()
        result = await client_of(http).complete(model(server.url), MESSAGES, deadline_s=5)
    assert isinstance(result, ChatFailure)
    assert "HTTP 429" in result.reason and "passes the deadline" in result.reason
    assert len(server.requests) == 1 and time.monotonic() - started < 1.0


async def test_5xx_is_retried_with_backoff_until_it_succeeds(http: httpx.AsyncClient) -> None:
    async with serve(sequence(Reply(500, "boom"), Reply(503, "busy"), completion("ok"))) as server:
        result = await client_of(http).complete(model(server.url), MESSAGES, deadline_s=5)
    assert isinstance(result, Completion) and result.text == "ok" and result.attempts == 3


async def test_persistent_5xx_fails_with_the_status_after_every_attempt(
    http: httpx.AsyncClient,
) -> None:
    async with serve(sequence(Reply(502, "bad gateway"))) as server:
        result = await client_of(http).complete(model(server.url), MESSAGES, deadline_s=5)
    assert isinstance(result, ChatFailure) and result.attempts == 3
    assert result.reason.startswith("HTTP 502: bad gateway") and "after 3 attempts" in result.reason
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply(200, "<html>not json</html>"), "malformed response"),
        (Reply(200, {"choices": []}), "malformed response"),
        (Reply(401, {"error": "bad key"}), "HTTP 401"),
        (Reply(400, {"error": "context length exceeded"}), "HTTP 400"),
    ],
)
async def test_answers_that_would_fail_again_are_not_retried(
    http: httpx.AsyncClient, reply: Reply, expected: str
) -> None:
    async with serve(sequence(reply, completion("never asked"))) as server:
        result = await client_of(http).complete(model(server.url), MESSAGES, deadline_s=5)
    assert isinstance(result, ChatFailure) and expected in result.reason
    assert len(server.requests) == 1


async def test_a_stalled_provider_cannot_pass_the_deadline(http: httpx.AsyncClient) -> None:
    async with serve(sequence(Stall(30.0, completion("too late")))) as server:
        started = time.monotonic()
        result = await client_of(http).complete(model(server.url), MESSAGES, deadline_s=0.5)
        elapsed = time.monotonic() - started
    assert isinstance(result, ChatFailure) and "deadline of 0.5 s passed" in result.reason
    assert 0.5 <= elapsed < 2.0  # the server would have stalled 30 s


async def test_the_deadline_covers_retries_and_backoff(http: httpx.AsyncClient) -> None:
    slow = RetryPolicy(max_attempts=20, backoff_s=0.2, breaker_failures=50)
    async with serve(sequence(Reply(500, "boom"))) as server:
        started = time.monotonic()
        result = await client_of(http, slow).complete(model(server.url), MESSAGES, deadline_s=0.8)
        elapsed = time.monotonic() - started
    assert isinstance(result, ChatFailure) and "HTTP 500" in result.reason
    assert elapsed < 2.0 and 1 < len(server.requests) < 20


async def test_a_dropped_connection_is_retried(http: httpx.AsyncClient) -> None:
    async with serve(sequence(Drop(), completion("ok"))) as server:
        result = await client_of(http).complete(model(server.url), MESSAGES, deadline_s=5)
    assert isinstance(result, Completion) and result.attempts == 2


async def test_connections_that_keep_dropping_fail_with_the_reason(
    http: httpx.AsyncClient,
) -> None:
    async with serve(sequence(Drop())) as server:
        result = await client_of(http).complete(model(server.url), MESSAGES, deadline_s=5)
    assert isinstance(result, ChatFailure) and result.reason.startswith("connection:")


async def test_a_refused_connection_is_a_failure_not_an_exception(
    http: httpx.AsyncClient,
) -> None:
    async with serve(sequence(completion("x"))) as server:
        url = server.url
    result = await client_of(http).complete(model(url), MESSAGES, deadline_s=5)
    assert isinstance(result, ChatFailure) and "connection" in result.reason


async def test_requests_to_a_model_never_exceed_its_concurrency(http: httpx.AsyncClient) -> None:
    async with serve(sequence(Stall(0.1, completion("ok")))) as server:
        client = client_of(http)
        chosen = model(server.url, max_concurrency=2)
        results = await asyncio.gather(
            *(client.complete(chosen, MESSAGES, deadline_s=5) for _ in range(6))
        )
    assert all(isinstance(r, Completion) for r in results)
    assert server.max_in_flight == 2


async def test_a_failing_model_is_paused_by_its_breaker(http: httpx.AsyncClient) -> None:
    policy = RetryPolicy(max_attempts=1, backoff_s=0.01, breaker_failures=2, breaker_cooldown_s=0.6)
    async with serve(sequence(Reply(500, "down"), Reply(500, "down"), completion("up"))) as server:
        client = client_of(http, policy)
        chosen = model(server.url)
        for _ in range(2):
            assert isinstance(await client.complete(chosen, MESSAGES, deadline_s=5), ChatFailure)
        assert client.breaker(chosen).is_open
        paused = await client.complete(chosen, MESSAGES, deadline_s=0.2)
        assert isinstance(paused, ChatFailure) and "after 0 attempt" in paused.reason
        assert len(server.requests) == 2  # nothing was sent while paused
        result = await client.complete(chosen, MESSAGES, deadline_s=5)  # waits out the pause
    assert isinstance(result, Completion) and not client.breaker(chosen).is_open
    assert server.requests[2].received_at - server.requests[1].received_at >= 0.5
