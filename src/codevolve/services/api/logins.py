"""Dashboard sign-ins: a random session id in the browser's cookie, the token behind it here.

The cookie never holds the API token: a stolen cookie expires (:data:`LOGIN_TTL_S`) and dies at
sign-out, and the token behind it is checked again on every request, so revoking the token ends
its sessions too. The store lives in the API process's memory: a restart signs everyone out, and
several API processes behind one address do not share sign-ins (route a browser to one process,
or sign in again).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

LOGIN_TTL_S = 12 * 3600  # seconds a sign-in lasts
MAX_LOGINS = 10_000  # live sign-ins kept; the oldest goes first beyond this


@dataclass(slots=True)
class LoginStore:
    """Session id -> (token, expiry, monotonic seconds). Only a valid token can sign in, so the
    store grows only with authenticated users; :data:`MAX_LOGINS` bounds it even then."""

    ttl_s: float = LOGIN_TTL_S
    capacity: int = MAX_LOGINS
    clock: Callable[[], float] = time.monotonic
    _live: dict[str, tuple[str, float]] = field(default_factory=dict)

    def open(self, token: str) -> str:
        """A new session id for ``token``."""
        self._drop_expired()
        while len(self._live) >= self.capacity:
            del self._live[next(iter(self._live))]  # dicts keep insertion order: the oldest
        session_id = secrets.token_urlsafe(32)
        self._live[session_id] = (token, self.clock() + self.ttl_s)
        return session_id

    def token_of(self, session_id: str) -> str | None:
        """The token behind a live session id; None for an unknown or expired one."""
        entry = self._live.get(session_id)
        if entry is None:
            return None
        token, expiry = entry
        if self.clock() >= expiry:
            del self._live[session_id]
            return None
        return token

    def close(self, session_id: str) -> None:
        self._live.pop(session_id, None)

    def _drop_expired(self) -> None:
        now = self.clock()
        for session_id in [s for s, (_, expiry) in self._live.items() if now >= expiry]:
            del self._live[session_id]
