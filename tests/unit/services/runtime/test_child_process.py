"""A part of the server in a child process (runtime/processes.py): a child that ends on its own
stops the server and says how; a stop ends the child, by SIGKILL when SIGTERM is not enough."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from codevolve.services.runtime import processes
from codevolve.services.runtime.processes import Command, Ended, child_process


def _python(code: str, name: str = "API") -> Command:
    return Command(name=name, argv=(sys.executable, "-c", code), env=dict(os.environ))


async def test_a_child_that_exits_on_its_own_sets_stop_and_says_how() -> None:
    stop = asyncio.Event()
    async with child_process(_python("raise SystemExit(3)")) as child:
        ended = await child.watch(stop)
    assert ended == Ended("API", 3)
    assert stop.is_set()
    assert str(ended) == "the API process exited with code 3"


async def test_a_stop_ends_the_child_and_the_block_waits_for_it() -> None:
    stop = asyncio.Event()
    async with child_process(_python("import time; time.sleep(60)")) as child:
        watching = asyncio.create_task(child.watch(stop))
        await asyncio.sleep(0.2)
        stop.set()
        assert await watching is None
    assert child.pid > 0
    with pytest.raises(ProcessLookupError):
        os.kill(child.pid, 0)  # reaped: the pid is no longer ours


async def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(processes, "STOP_GRACE_S", 0.5)
    ready = tmp_path / "ready"
    code = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )
    async with child_process(_python(code)) as child:
        for _ in range(600):  # up to 30 s for the interpreter to start on a loaded machine
            if ready.exists():  # SIGTERM is ignored from then on
                break
            await asyncio.sleep(0.05)
        returncode = await child.stop()
    assert str(Ended("API", returncode)) == "the API process was killed by SIGKILL"


def test_a_signal_without_a_name_is_shown_by_number() -> None:
    assert str(Ended("API 2", -99)) == "the API 2 process was killed by signal 99"
