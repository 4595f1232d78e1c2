"""A circuit breaker per model: after ``failures`` failed requests in a row the model is paused
for ``cooldown_s``; then one trial request is let through (half-open), and its outcome closes the
breaker or pauses the model again.

Pausing keeps a provider that is down from eating every proposal's deadline and retry budget: the
ensemble asks another model, or waits for the cooldown, instead of hammering a dead endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from codevolve.proposers.errors import ProposerError

Clock = Callable[[], float]  # monotonic seconds


class CircuitBreaker:
    """Closed (requests flow), open (paused until a time), half-open (one trial in flight)."""

    def __init__(self, *, failures: int, cooldown_s: float, clock: Clock = time.monotonic) -> None:
        if failures < 1 or cooldown_s <= 0:
            raise ProposerError(
                f"breaker needs failures >= 1 and cooldown_s > 0, got {failures}, {cooldown_s}"
            )
        self._threshold = failures
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._consecutive = 0
        self._open_until: float | None = None  # monotonic seconds; None when closed
        self._trial_in_flight = False

    def wait_s(self) -> float:
        """Seconds until a request may go (0.0: now)."""
        if self._open_until is None:
            return 0.0
        return max(0.0, self._open_until - self._clock())

    def acquire(self) -> bool:
        """Claim the right to send a request now; False while the model is paused.

        The first claim after a pause is the trial: the model stays paused for everyone else for
        another cooldown (or until the trial succeeds), so a trial that never reports back (its
        proposal was cancelled) only delays the next trial.
        """
        if self._open_until is None:
            return True
        now = self._clock()
        if now < self._open_until:
            return False
        self._open_until = now + self._cooldown_s
        self._trial_in_flight = True
        return True

    def success(self) -> None:
        self._consecutive = 0
        self._open_until = None
        self._trial_in_flight = False

    def failure(self) -> None:
        self._consecutive += 1
        if self._trial_in_flight or self._consecutive >= self._threshold:
            self._open_until = self._clock() + self._cooldown_s
            self._trial_in_flight = False

    @property
    def is_open(self) -> bool:
        return self.wait_s() > 0
