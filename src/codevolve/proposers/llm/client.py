"""An async client for the chat-completions protocol of OpenAI-compatible servers.

``POST {base_url}/chat/completions`` with ``{"model", "messages", "temperature", "max_tokens"}``;
the answer is ``choices[0].message.content`` and ``usage.prompt_tokens`` /
``usage.completion_tokens``. OpenAI, vLLM, Ollama (``/v1``), LiteLLM and most proxies speak it.

One call of :meth:`ChatClient.complete` is one proposal's request, and it always returns a value:
a :class:`Completion` or a :class:`ChatFailure` whose ``reason`` says why there is no answer.

- Retried, with exponential backoff and jitter: HTTP 408, 409, 429 and 5xx, connection errors,
  dropped connections and read timeouts. A ``Retry-After`` header (seconds or an HTTP date) is
  honoured as the least wait; one that would pass the deadline ends the call at once.
- Not retried: other 4xx (a bad key, an unknown model, a prompt too long) and a 200 whose body is
  not a chat completion; retrying would fail the same way and may be billed again.
- A model's ``timeout_s`` bounds each request (a retryable timeout past it); the deadline
  covers everything: waiting for a paused model, for a concurrency slot, every
  attempt and every backoff. A provider that stalls cannot hold a proposal longer than that.
- A per-model semaphore bounds the requests in flight; a per-model circuit breaker pauses a model
  whose requests keep failing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from codevolve.core.config import ModelConfig
from codevolve.proposers.llm.breaker import CircuitBreaker

Sleep = Callable[[float], Awaitable[None]]
Message = dict[str, str]  # {"role": "system" | "user", "content": ...}

RETRYABLE_STATUS = frozenset({408, 409, 429})  # and every 5xx
MAX_BACKOFF_S = 30.0  # seconds; cap of one backoff
MAX_REASON_CHARS = 300  # characters of a provider's error body kept in a reason
CHARS_PER_TOKEN = 4  # rough estimate when a server reports no usage


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 4  # requests per call, the first included
    backoff_s: float = 1.0  # seconds before the first retry, doubled per retry (plus jitter)
    breaker_failures: int = 5  # failed requests in a row that pause a model
    breaker_cooldown_s: float = 30.0  # seconds a paused model is left alone


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    tokens_in: int
    tokens_out: int
    attempts: int
    finish_reason: str = ""  # "stop", "length" (cut at max_tokens), ...


@dataclass(frozen=True, slots=True)
class ChatFailure:
    reason: str
    attempts: int


@dataclass(frozen=True, slots=True)
class _AttemptFailed:
    reason: str
    retryable: bool
    retry_after_s: float | None = None  # seconds the server asked us to wait


class ChatClient:
    """Sends chat completions for any number of models; one instance per run.

    ``http`` is owned by the caller (its lifetime is the run's). ``rng`` only draws backoff jitter.
    ``env`` is where API keys are read (default: the process environment).
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        policy: RetryPolicy,
        rng: np.random.Generator,
        sleep: Sleep = asyncio.sleep,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._http = http
        self._policy = policy
        self._rng = rng
        self._sleep = sleep
        self._env = os.environ if env is None else env
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._breakers: dict[str, CircuitBreaker] = {}

    def breaker(self, model: ModelConfig) -> CircuitBreaker:
        breaker = self._breakers.get(model.name)
        if breaker is None:
            breaker = CircuitBreaker(
                failures=self._policy.breaker_failures, cooldown_s=self._policy.breaker_cooldown_s
            )
            self._breakers[model.name] = breaker
        return breaker

    async def complete(
        self, model: ModelConfig, messages: list[Message], *, deadline_s: float
    ) -> Completion | ChatFailure:
        """One answer from ``model``, or why there is none, within ``deadline_s`` seconds."""
        started = time.monotonic()
        attempts = 0
        last = "no request was sent"
        try:
            async with asyncio.timeout(deadline_s):
                while True:
                    await self._wait_for_breaker(model)
                    attempts += 1
                    outcome = await self._attempt(model, messages)
                    if isinstance(outcome, Completion):
                        self.breaker(model).success()
                        return _with_attempts(outcome, attempts)
                    self.breaker(model).failure()
                    last = outcome.reason
                    if not outcome.retryable or attempts >= self._policy.max_attempts:
                        return ChatFailure(_after(attempts, last), attempts)
                    delay = self._backoff_s(attempts, outcome.retry_after_s)
                    left = deadline_s - (time.monotonic() - started)
                    if outcome.retry_after_s is not None and outcome.retry_after_s >= left:
                        return ChatFailure(
                            f"{_after(attempts, last)}; Retry-After of {outcome.retry_after_s:g} s"
                            f" passes the deadline",
                            attempts,
                        )
                    await self._sleep(min(delay, max(left, 0.0)))
        except TimeoutError:
            return ChatFailure(
                f"deadline of {deadline_s:g} s passed after {attempts} attempt(s); last: {last}",
                attempts,
            )

    async def _wait_for_breaker(self, model: ModelConfig) -> None:
        breaker = self.breaker(model)
        while not breaker.acquire():
            await self._sleep(breaker.wait_s())

    async def _attempt(
        self, model: ModelConfig, messages: list[Message]
    ) -> Completion | _AttemptFailed:
        semaphore = self._semaphores.setdefault(
            model.name, asyncio.Semaphore(model.max_concurrency)
        )
        async with semaphore:
            try:
                response = await self._http.post(
                    model.base_url.rstrip("/") + "/chat/completions",
                    json={
                        "model": model.name,
                        "messages": messages,
                        "temperature": model.temperature,
                        "max_tokens": model.max_tokens,
                    },
                    headers=self._headers(model),
                    timeout=self._timeout(model),
                )
            except httpx.TimeoutException as error:
                return _AttemptFailed(f"timeout: {type(error).__name__}", retryable=True)
            except httpx.TransportError as error:  # refused, reset, dropped mid-answer
                return _AttemptFailed(f"connection: {type(error).__name__}: {error}", True)
        return _read(response, messages)

    @staticmethod
    def _timeout(model: ModelConfig) -> Any:  # httpx.Timeout or httpx's "the client's default"
        """One request's limit when the model sets one; the client's otherwise."""
        if model.timeout_s is None:
            return httpx.USE_CLIENT_DEFAULT
        return httpx.Timeout(model.timeout_s, connect=min(10.0, model.timeout_s))

    def _headers(self, model: ModelConfig) -> dict[str, str]:
        if model.api_key_env is None:
            return {}
        key = self._env.get(model.api_key_env, "")
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _backoff_s(self, attempts: int, retry_after_s: float | None) -> float:
        """Exponential backoff with equal jitter: half fixed, half uniform; never less than what
        the server asked for."""
        ceiling = min(MAX_BACKOFF_S, self._policy.backoff_s * 2.0 ** (attempts - 1))
        delay = ceiling / 2 + float(self._rng.uniform(0.0, ceiling / 2))
        return max(delay, retry_after_s or 0.0)


def _with_attempts(completion: Completion, attempts: int) -> Completion:
    return dataclasses.replace(completion, attempts=attempts)


def _after(attempts: int, reason: str) -> str:
    return f"{reason} (after {attempts} attempt{'s' if attempts != 1 else ''})"


def _read(response: httpx.Response, messages: list[Message]) -> Completion | _AttemptFailed:
    status = response.status_code
    if status != 200:
        reason = f"HTTP {status}: {_clip(response.text)}"
        retryable = status in RETRYABLE_STATUS or status >= 500
        return _AttemptFailed(reason, retryable, retry_after(response.headers.get("retry-after")))
    try:
        body = response.json()
        choice = body["choices"][0]
        content = choice["message"]["content"]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError) as error:
        return _AttemptFailed(
            f"malformed response ({type(error).__name__}): {_clip(response.text)}", False
        )
    text = content if isinstance(content, str) else ""
    usage = body.get("usage") if isinstance(body, dict) else None
    tokens_in, tokens_out = _usage(usage)
    if tokens_in is None:
        tokens_in = sum(len(m["content"]) for m in messages) // CHARS_PER_TOKEN
    if tokens_out is None:
        tokens_out = len(text) // CHARS_PER_TOKEN
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    return Completion(
        text=text,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        attempts=1,
        finish_reason=finish if isinstance(finish, str) else "",
    )


def _usage(usage: Any) -> tuple[int | None, int | None]:
    if not isinstance(usage, dict):
        return None, None
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def _count(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def retry_after(header: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for: delta-seconds or an HTTP date; None if absent
    or unreadable."""
    if header is None:
        return None
    header = header.strip()
    try:
        seconds = float(header)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(header)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS] + "..."
