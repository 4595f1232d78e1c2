"""The dashboard's sign-in store: ids are random, expire, end at sign-out, and are bounded."""

from __future__ import annotations

from codevolve.services.api.logins import LoginStore
from tests.clock import ManualClock


def test_a_session_id_maps_to_its_token_until_it_expires_or_closes() -> None:
    clock = ManualClock(0.0)
    store = LoginStore(ttl_s=100.0, clock=clock)
    first, second = store.open("token-a"), store.open("token-a")
    assert first != second and len(first) >= 40 and "token-a" not in first
    assert store.token_of(first) == "token-a"
    store.close(first)
    assert store.token_of(first) is None and store.token_of(second) == "token-a"
    clock.now = 100.0
    assert store.token_of(second) is None
    assert store.token_of("made-up") is None and store.token_of("") is None


def test_the_store_keeps_at_most_its_capacity_dropping_the_oldest() -> None:
    clock = ManualClock(0.0)
    store = LoginStore(ttl_s=100.0, capacity=3, clock=clock)
    ids = [store.open(f"t{i}") for i in range(5)]
    assert [store.token_of(i) for i in ids] == [None, None, "t2", "t3", "t4"]
    clock.now = 150.0  # all expired: opening drops them first, so no live one is pushed out
    kept = store.open("t5")
    for token in ("t6", "t7"):
        store.open(token)
    assert store.token_of(kept) == "t5"
