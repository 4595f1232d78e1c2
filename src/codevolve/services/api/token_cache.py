"""The API process's short memory of live bearer tokens.

Every API request names a token; looking it up in the database was one statement per request,
about a tenth of the API's CPU in a burst (docs/deploy.md, "Under load"). So a token found live
is kept for :data:`TOKEN_CACHE_S`, keyed by its sha256 (the stored form: the cache holds no
secret), at most :data:`MAX_TOKENS` of them, the oldest dropped first.

What that means for revocation: a token revoked through this process's API is refused at once
(:meth:`TokenCache.forget`); one revoked elsewhere (``codevolve token revoke``, another API
process) is refused by this process within :data:`TOKEN_CACHE_S`. Only live tokens are kept: an
unknown or revoked token is looked up, and refused, on every request, and a token created
elsewhere works at once.

A burst arrives all at once: requests that miss the cache together for one token share one
lookup (:meth:`TokenCache.live`, through
:class:`~codevolve.services.api.single_flight.SingleFlight`), so a burst costs one statement, not
one per request.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from codevolve.program_db.tokens import ApiToken
from codevolve.services.api.single_flight import SingleFlight

TOKEN_CACHE_S = 5.0  # seconds a live token is trusted without asking the database again
MAX_TOKENS = 4096  # tokens kept at once; a burst of more tokens than this only costs lookups

Clock = Callable[[], float]  # monotonic seconds
Lookup = Callable[[], Awaitable[ApiToken | None]]  # the database's answer: the live token or None


@dataclass(slots=True)
class TokenCache:
    """Live tokens by the sha256 of their secret, each for ``ttl_s`` after it was looked up."""

    ttl_s: float = TOKEN_CACHE_S
    max_tokens: int = MAX_TOKENS
    clock: Clock = time.monotonic
    # digest -> (when it expires, the token); insertion order is expiry order (one ttl for all)
    _live: dict[str, tuple[float, ApiToken]] = field(default_factory=dict)
    # token id -> until when a lookup that began before its revocation must not be kept
    _revoked: dict[str, float] = field(default_factory=dict)
    _lookups: SingleFlight[str, ApiToken | None] = field(default_factory=SingleFlight)

    async def live(self, digest: str, lookup: Lookup) -> ApiToken | None:
        """The live token of ``digest``: kept, else what ``lookup`` finds (then kept). Callers
        that miss while a lookup of the same digest is in flight wait for its answer; if that
        lookup fails (or its request is cancelled), each asks for itself."""
        token = self.get(digest)
        if token is not None:
            return token
        found, own = await self._lookups.call(digest, lookup)
        if own and found is not None:
            self.put(digest, found)
        return found

    def get(self, digest: str) -> ApiToken | None:
        """The token, if it was found live less than ``ttl_s`` ago; None: ask the database."""
        entry = self._live.get(digest)
        if entry is None:
            return None
        if entry[0] <= self.clock():
            del self._live[digest]
            return None
        return entry[1]

    def put(self, digest: str, token: ApiToken) -> None:
        """Keep a token the database just found live, unless it was revoked here meanwhile."""
        now = self.clock()
        revoked_until = self._revoked.get(token.id)
        if revoked_until is not None:
            if revoked_until > now:
                return
            del self._revoked[token.id]
        self._live.pop(digest, None)  # re-inserted last: the dict stays in expiry order
        while len(self._live) >= self.max_tokens:
            del self._live[next(iter(self._live))]
        self._live[digest] = (now + self.ttl_s, token)

    def forget(self, token_id: str) -> None:
        """A token revoked through this process: drop it, and refuse to keep it for ``ttl_s``
        (a lookup that read it live just before the revocation committed may still land)."""
        now = self.clock()
        for digest in [d for d, (_, token) in self._live.items() if token.id == token_id]:
            del self._live[digest]
        self._revoked = {i: until for i, until in self._revoked.items() if until > now}
        self._revoked[token_id] = now + self.ttl_s
