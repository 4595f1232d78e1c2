"""Proposal processes: the CPU-bound half of a proposal, run beside the controller's event loop.

A proposal is: draw a parent (the in-memory archive), build the prompt, get an answer from the
proposer, apply it to the parent, hash the child, draw the child's evaluation seed. With a proposer
that computes its answer here (``Proposer.cpu_bound``: the simulated proposer) the answer, the
apply and the hash are most of a controller's CPU, and one event loop is one core. A
:class:`ProposalPool` runs them in forked child processes: the controller sends the prompt and the
proposal's generator state, a child answers with a :class:`Settled` value. The children are forked
from the controller, so they hold its proposer and problem as they are (nothing is pickled but the
prompt and the result); they exit when the controller closes their socket or dies.

The result is the one :func:`settle` gives in the controller's own process: the generator travels
with the prompt and every draw happens in the same order. A call whose child died (killed, out of
memory) is run again in the controller's process from the same generator state, with the same
result; a pool whose children are all gone runs every call there.
"""

from __future__ import annotations

import asyncio
import copyreg
import dataclasses
import hashlib
import io
import itertools
import logging
import os
import pickle
import signal
import socket
import struct
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from codevolve.core.diff import Applied, ApplyFailure, ApplyOutcome
from codevolve.core.program import CaseResult
from codevolve.core.prompt import BestCase, ProgramView, Prompt, Proposal
from codevolve.prompt_sampler.search_replace import apply_answer
from codevolve.proposers.base import Proposer

log = logging.getLogger(__name__)

_FRAME = struct.Struct("!I")  # each message: its length, then a pickle
_PICKLE = pickle.HIGHEST_PROTOCOL
_CHILD_ERROR = "the proposal process raised"
CLOSE_TIMEOUT_S = 5.0  # seconds a child gets to exit once its socket is closed


def content_hash(source: str) -> str:
    """Dedupe key: the source with trailing whitespace of each line ignored."""
    canonical = "\n".join(line.rstrip() for line in source.strip().splitlines())
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Settled:
    """What a proposal came to before anything is written."""

    proposal: Proposal
    outcome: ApplyOutcome | None  # None: the proposer failed (``proposal.error`` says why)
    content_hash: str  # of the child's source; "" when there is no child
    seed: int  # the child's evaluation seed, drawn after the answer; 0 when there is no child


def settle_now(
    proposer: Proposer, prompt: Prompt, rng: np.random.Generator, *, max_code_length: int
) -> Settled:
    """The proposer's answer to ``prompt``, applied to the parent; runs ``propose`` to its end
    without an event loop, which a ``cpu_bound`` proposer allows (it never awaits)."""
    proposal = _run_to_end(proposer.propose(prompt, rng))
    return _applied(proposal, prompt, rng, max_code_length=max_code_length)


async def settle(
    proposer: Proposer, prompt: Prompt, rng: np.random.Generator, *, max_code_length: int
) -> Settled:
    """:func:`settle_now` for any proposer, in this process: the answer may be awaited (an API)."""
    proposal = await proposer.propose(prompt, rng)
    return _applied(proposal, prompt, rng, max_code_length=max_code_length)


def _applied(
    proposal: Proposal, prompt: Prompt, rng: np.random.Generator, *, max_code_length: int
) -> Settled:
    if proposal.error:
        return Settled(proposal=proposal, outcome=None, content_hash="", seed=0)
    outcome = apply_answer(prompt.parent.source, proposal.text, max_code_length=max_code_length)
    if isinstance(outcome, ApplyFailure):
        return Settled(proposal=proposal, outcome=outcome, content_hash="", seed=0)
    seed = int(rng.integers(2**31))
    return Settled(
        proposal=proposal, outcome=outcome, content_hash=content_hash(outcome.source), seed=seed
    )


def _fields_reducer(cls: type) -> Any:
    """Pickle a frozen dataclass as its constructor call: pickle's default for slotted
    dataclasses calls ``dataclasses.fields`` for every object, each way."""
    names = tuple(field.name for field in dataclasses.fields(cls))
    if any(not field.init or field.kw_only for field in dataclasses.fields(cls)):
        raise TypeError(f"{cls.__name__} cannot be rebuilt from its fields in order")

    def reduce(obj: object) -> tuple[type, tuple[Any, ...]]:
        return cls, tuple([getattr(obj, name) for name in names])

    return reduce


# What crosses a proposal process's socket, each way.
_DISPATCH = copyreg.dispatch_table.copy()
for _cls in (Prompt, ProgramView, BestCase, CaseResult, Proposal, Settled, Applied, ApplyFailure):
    _DISPATCH[_cls] = _fields_reducer(_cls)


def _dumps(message: object) -> bytes:
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, _PICKLE)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(message)
    return buffer.getvalue()


def _run_to_end(coroutine: Coroutine[Any, Any, Proposal]) -> Proposal:
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("a cpu_bound proposer awaited something; it cannot run in a process")


class ProposalPool:
    """``async with ProposalPool(proposer, processes=4, ...) as pool: await pool.settle(...)``.

    Each call goes to the child with the fewest calls outstanding. ``processes`` of 0 runs every
    call in this process (the pool is then a plain call of :func:`settle`)."""

    def __init__(self, proposer: Proposer, *, processes: int, max_code_length: int) -> None:
        if processes < 0:
            raise ValueError(f"processes must be at least 0, got {processes}")
        if processes and not proposer.cpu_bound:
            raise ValueError(f"proposer {proposer.name!r} is not cpu_bound: it runs in-process")
        self._proposer = proposer
        self._processes = processes
        self._max_code_length = max_code_length
        self._children: list[_Child] = []
        self._calls = itertools.count()

    @property
    def pids(self) -> list[int]:
        """The process ids of the children still serving."""
        return [child.pid for child in self._children if child.alive]

    async def __aenter__(self) -> ProposalPool:
        loop = asyncio.get_running_loop()
        for _ in range(self._processes):
            parent_end, child_end = socket.socketpair()
            pid = os.fork()
            if pid == 0:  # the child: serve until the controller closes the socket
                parent_end.close()
                for child in self._children:
                    child.close_inherited()
                _serve(child_end, self._proposer, self._max_code_length)
            child_end.close()
            link = _Link()
            await loop.create_connection(lambda link=link: link, sock=parent_end)  # type: ignore[misc]
            self._children.append(_Child(pid=pid, link=link))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        children, self._children = self._children, []
        for child in children:
            child.link.close()
        await asyncio.gather(*(asyncio.to_thread(_reap, child.pid) for child in children))

    async def settle(self, prompt: Prompt, rng: np.random.Generator) -> Settled:
        """The proposal's :class:`Settled`; ``rng`` is used as :func:`settle` would use it."""
        live = [child for child in self._children if child.alive]
        if not live:
            return await settle(self._proposer, prompt, rng, max_code_length=self._max_code_length)
        child = min(live, key=lambda c: len(c.link.waiting))
        state = rng.bit_generator.state
        try:
            answer = await child.link.call(next(self._calls), (prompt, state))
        except _ChildGone:
            log.warning("proposal process %d is gone; its proposals run here", child.pid)
            return await settle(self._proposer, prompt, rng, max_code_length=self._max_code_length)
        result, state = answer
        rng.bit_generator.state = state  # the draws the child made, as if made here
        if isinstance(result, str):  # the child's proposer raised: raise it here, as in-process
            raise RuntimeError(f"{_CHILD_ERROR}: {result}")
        assert isinstance(result, Settled)
        return result


@dataclass(slots=True)
class _Child:
    pid: int
    link: _Link

    @property
    def alive(self) -> bool:  # its socket is open
        return not self.link.gone

    def close_inherited(self) -> None:
        """In a freshly forked sibling: drop this child's socket (its EOF must reach it)."""
        transport = self.link.transport
        if transport is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                os.close(sock.fileno())


class _ChildGone(Exception):
    """The child's socket closed before it answered."""


class _Link(asyncio.Protocol):
    """The controller's end of one child's socket: framed pickles each way, answers in order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: dict[int, asyncio.Future[tuple[Any, Any]]] = {}
        self.gone = False
        self._buffer = bytearray()
        self._outgoing: list[bytes] = []  # calls made since the last flush: sent in one write

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def call(self, ident: int, request: object) -> asyncio.Future[tuple[Any, Any]]:
        future: asyncio.Future[tuple[Any, Any]] = asyncio.get_running_loop().create_future()
        if self.gone or self.transport is None:
            future.set_exception(_ChildGone())
            return future
        self.waiting[ident] = future
        body = _dumps((ident, request))
        if not self._outgoing:  # the first call of this turn of the loop sends them all after it
            asyncio.get_running_loop().call_soon(self._flush)
        self._outgoing += (_FRAME.pack(len(body)), body)
        return future

    def _flush(self) -> None:
        """One write (one system call) for every call made in a turn of the event loop: a send
        costs the sender far more than the few bytes it carries."""
        outgoing, self._outgoing = self._outgoing, []
        if self.transport is not None and not self.gone:
            self.transport.write(b"".join(outgoing))

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= _FRAME.size:
            (size,) = _FRAME.unpack_from(buffer, start)
            end = start + _FRAME.size + size
            if len(buffer) < end:
                break
            ident, answer = pickle.loads(memoryview(buffer)[start + _FRAME.size : end])
            start = end
            future = self.waiting.pop(ident, None)
            if future is not None and not future.done():
                future.set_result(answer)
        del buffer[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        waiting, self.waiting = self.waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(_ChildGone())

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _serve(sock: socket.socket, proposer: Proposer, max_code_length: int) -> None:
    """A child's whole life: answer requests until the socket closes, then exit at once (no
    cleanup of what the fork inherited: the controller's connections are not this process's)."""
    code = 0
    try:
        signal.set_wakeup_fd(-1)  # the controller's event loop's pipe: not this process's
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the controller, which closes
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        reader = sock.makefile("rb")
        while header := reader.read(_FRAME.size):
            (size,) = _FRAME.unpack(header)
            ident, (prompt, state) = pickle.loads(reader.read(size))
            rng = np.random.Generator(getattr(np.random, state["bit_generator"])())
            rng.bit_generator.state = state
            result: Settled | str
            try:
                result = settle_now(proposer, prompt, rng, max_code_length=max_code_length)
            except Exception as error:  # noqa: BLE001  (sent back, raised in the controller)
                result = f"{type(error).__name__}: {error}"
            body = _dumps((ident, (result, rng.bit_generator.state)))
            sock.sendall(_FRAME.pack(len(body)) + body)
    except BaseException:  # noqa: BLE001  (a broken socket: the controller is gone)
        code = 1
    finally:
        os._exit(code)


def _reap(pid: int) -> None:
    """Wait for a child whose socket was closed; kill it if it does not exit in time."""
    deadline = CLOSE_TIMEOUT_S
    step = 0.01
    while deadline > 0:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(step)
        deadline -= step
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
