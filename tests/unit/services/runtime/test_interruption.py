"""The embedded run's signal handling (``runtime.embedded._Interruption``), in this process: the
first SIGINT or SIGTERM cancels the run; the same signal again within the repeat window (GNU
timeout signals a command, then its process group) is the same request, during the run's wind-down
and after it; a later one takes the process's own handler again."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from codevolve.services.runtime import embedded


async def _run(interruption: embedded._Interruption, first: int, then: int | None = None) -> str:
    """A run that sends itself ``first``, then ``then`` while it winds down (0.2 s)."""
    with interruption.handled(enabled=True):
        try:
            os.kill(os.getpid(), first)
            await asyncio.sleep(30)
            return "not cancelled"
        except asyncio.CancelledError:
            if then is not None:
                os.kill(os.getpid(), then)
            await asyncio.sleep(0.2)  # the second signal's handler runs here
            return "wound down"


def test_a_repeat_during_the_wind_down_is_the_same_request() -> None:
    interruption = embedded._Interruption()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        try:
            assert asyncio.run(_run(interruption, signal.SIGTERM, signal.SIGTERM)) == "wound down"
        except KeyboardInterrupt:  # (pytest would stop the whole session on it)
            pytest.fail("the repeated SIGTERM was taken for a second request")
        assert interruption.signal == "SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)  # a repeat after the run, within the window
        time.sleep(0.05)  # (the handler runs between bytecodes)
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_another_signal_while_winding_down_stops_at_once() -> None:
    with pytest.raises(KeyboardInterrupt):  # not a repeat: the user insists
        asyncio.run(_run(embedded._Interruption(), signal.SIGTERM, signal.SIGINT))


def test_a_repeat_after_the_window_gets_the_process_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embedded, "REPEAT_WINDOW_S", 0.05)
    previous = signal.getsignal(signal.SIGINT)
    try:
        assert asyncio.run(_run(embedded._Interruption(), signal.SIGINT)) == "wound down"
        time.sleep(0.1)  # past the window
        with pytest.raises(KeyboardInterrupt):  # Python's own SIGINT handler again
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGINT) is previous
    finally:
        signal.signal(signal.SIGINT, previous)
