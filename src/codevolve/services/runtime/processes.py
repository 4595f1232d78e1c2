"""The processes of ``codevolve serve``: a part started as a child, watched and stopped with it.

``serve`` runs the controllers in its own process and the API in a child (services/cli/dist.py),
so that requests are not queued behind twenty controllers in one event loop and one GIL. The
contract between the two:

- The parent owns the child's life. The child runs in a process group of its own, so that a
  Ctrl-C at the terminal reaches the parent only; the parent then sends the child SIGTERM and
  waits :data:`STOP_GRACE_S` for it before SIGKILL. Stopping always waits for the child to end:
  no orphan is left behind.
- A parent killed without a chance to stop its child (SIGKILL, a crash) is noticed by the child:
  its parent's pid changes (:func:`stop_with_parent`), and it stops within
  :data:`PARENT_CHECK_S`.
- A child that ends on its own ends the whole server: :meth:`Child.watch` sets the parent's stop
  and reports how the child ended; the command's exit code says so.
- The child writes to the parent's stdout and stderr: both parts' logs reach the terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

STOP_GRACE_S = 15.0  # seconds a child has to stop after SIGTERM before it is killed
PARENT_CHECK_S = 0.5  # seconds between a child's looks at its parent's pid
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set ``stop`` (the running loop's handlers, so they work in any await)."""
    loop = asyncio.get_running_loop()
    for number in STOP_SIGNALS:
        loop.add_signal_handler(number, stop.set)


async def stop_with_parent(parent_pid: int, stop: asyncio.Event) -> None:
    """Set ``stop`` once this process's parent is no longer ``parent_pid`` (it died: the child
    was handed to init or a subreaper). Returns when ``stop`` is set either way."""
    while not stop.is_set():
        if os.getppid() != parent_pid:
            log.warning("the serve process %d is gone; this process stops", parent_pid)
            stop.set()
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PARENT_CHECK_S):
                await stop.wait()


@dataclass(frozen=True, slots=True)
class Ended:
    """How a child ended: its name and ``returncode`` (negative: killed by that signal)."""

    name: str
    returncode: int

    def __str__(self) -> str:
        if self.returncode >= 0:
            return f"the {self.name} process exited with code {self.returncode}"
        try:
            killer = signal.Signals(-self.returncode).name
        except ValueError:
            killer = f"signal {-self.returncode}"
        return f"the {self.name} process was killed by {killer}"


class Child:
    """A running child process of the server; made by :func:`child_process`."""

    def __init__(self, name: str, process: asyncio.subprocess.Process) -> None:
        self.name = name
        self._process = process

    @property
    def pid(self) -> int:
        return self._process.pid

    async def watch(self, stop: asyncio.Event) -> Ended | None:
        """Wait until the child ends or ``stop`` is set. A child that ended first ends the whole
        server: ``stop`` is set and how it ended is returned (None when ``stop`` came first)."""
        async with asyncio.TaskGroup() as tg:
            ended = tg.create_task(self._process.wait())
            stopped = tg.create_task(stop.wait())
            await asyncio.wait((ended, stopped), return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():  # the server stops: the child stops beside the other parts
                ended.cancel()
                self.terminate()
                return None
            stopped.cancel()
        stop.set()
        how = Ended(self.name, ended.result())
        log.error("%s; the server stops", how)
        return how

    async def stop(self) -> int:
        """SIGTERM, up to :data:`STOP_GRACE_S` to end, then SIGKILL; returns the exit code. Safe
        to call on a child that already ended."""
        if self._process.returncode is None:
            self.terminate()
            try:
                async with asyncio.timeout(STOP_GRACE_S):
                    return await self._process.wait()
            except TimeoutError:
                log.warning("the %s process did not stop in %g s: killed", self.name, STOP_GRACE_S)
                self.kill()
        return await self._process.wait()

    def terminate(self) -> None:
        """SIGTERM, without waiting: the child stops as it would on Ctrl-C."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()

    def kill(self) -> None:
        """SIGKILL, without waiting (the last resort of a parent that is being cancelled)."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()


@dataclass(frozen=True, slots=True)
class Command:
    """What starts a part of the server in a child process."""

    name: str  # the part, in messages: "the API process exited with code 1"
    argv: tuple[str, ...]
    env: Mapping[str, str]  # the child's whole environment
    pass_fds: tuple[int, ...] = ()  # file descriptors the child inherits (a listening socket)


@contextlib.asynccontextmanager
async def child_process(command: Command) -> AsyncIterator[Child]:
    """Start ``command`` as a child of this process for the block; it is stopped (and waited
    for) when the block ends, however it ends."""
    process = await asyncio.create_subprocess_exec(
        *command.argv, env=dict(command.env), pass_fds=command.pass_fds, process_group=0
    )
    child = Child(command.name, process)
    log.info("the %s process started (pid %d)", command.name, process.pid)
    try:
        yield child
    finally:
        try:
            await child.stop()
        except asyncio.CancelledError:  # no time left to wait: it must not outlive us
            child.kill()
            raise
