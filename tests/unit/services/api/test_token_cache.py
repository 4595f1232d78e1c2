"""The API's cache of live tokens: kept for its time, bounded, and a token revoked here is never
kept again within that time."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from codevolve.program_db.tokens import ApiToken
from codevolve.services.api.token_cache import TokenCache
from tests.clock import ManualClock

CREATED = datetime(2025, 1, 1, tzinfo=UTC)


def _token(token_id: str, owner: str = "alice") -> ApiToken:
    return ApiToken(id=token_id, owner=owner, can_upload=False, created_at=CREATED)


def test_a_token_is_kept_for_its_time_and_then_asked_for_again() -> None:
    clock = ManualClock(100.0)
    cache = TokenCache(ttl_s=5.0, clock=clock)
    cache.put("digest-a", _token("a"))
    clock.now += 4.9
    assert cache.get("digest-a") == _token("a")
    clock.now += 0.2
    assert cache.get("digest-a") is None
    assert cache.get("never-seen") is None


def test_the_oldest_token_goes_first_when_the_cache_is_full() -> None:
    cache = TokenCache(max_tokens=2, clock=ManualClock(100.0))
    for name in ("a", "b", "c"):
        cache.put(f"digest-{name}", _token(name))
    assert cache.get("digest-a") is None
    assert cache.get("digest-b") == _token("b")
    assert cache.get("digest-c") == _token("c")


def test_a_token_revoked_here_is_dropped_and_not_kept_again_within_its_time() -> None:
    clock = ManualClock(100.0)
    cache = TokenCache(ttl_s=5.0, clock=clock)
    cache.put("digest-a", _token("a"))
    cache.put("digest-b", _token("b"))
    cache.forget("a")
    assert cache.get("digest-a") is None
    assert cache.get("digest-b") == _token("b")
    # a lookup that read the token live before the revocation committed lands afterwards
    cache.put("digest-a", _token("a"))
    assert cache.get("digest-a") is None
    clock.now += 5.0  # by now every lookup sees the revocation: a live answer is the truth
    cache.put("digest-a", _token("a"))
    assert cache.get("digest-a") == _token("a")


async def test_requests_that_miss_together_share_one_lookup_and_a_refusal_is_not_kept() -> None:
    cache = TokenCache(clock=ManualClock(100.0))
    asked: list[str] = []
    answer = asyncio.Event()

    async def lookup(token: ApiToken | None) -> ApiToken | None:
        asked.append("once")
        await answer.wait()
        return token

    async def burst(token: ApiToken | None) -> list[ApiToken | None]:
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(cache.live("digest-a", lambda: lookup(token))) for _ in range(5)
            ]
            await asyncio.sleep(0)
            answer.set()
        answer.clear()
        return [task.result() for task in tasks]

    assert await burst(None) == [None] * 5  # unknown: every waiter refused, nothing kept
    assert len(asked) == 1 and cache.get("digest-a") is None
    assert await burst(_token("a")) == [_token("a")] * 5  # created meanwhile: found at once
    assert len(asked) == 2 and cache.get("digest-a") == _token("a")


async def test_when_the_shared_lookup_fails_each_waiter_asks_for_itself() -> None:
    cache = TokenCache(clock=ManualClock(100.0))
    calls = 0
    started = asyncio.Event()

    async def lookup() -> ApiToken | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            started.set()
            await asyncio.sleep(0.01)
            raise ConnectionError("the database went away")
        return _token("a")

    async def first() -> ApiToken | None:
        return await cache.live("digest-a", lookup)

    async def second() -> ApiToken | None:
        await started.wait()
        return await cache.live("digest-a", lookup)

    results = await asyncio.gather(first(), second(), return_exceptions=True)
    assert isinstance(results[0], ConnectionError)
    assert results[1] == _token("a") and calls == 2
