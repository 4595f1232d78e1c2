"""The baselines of a KernelBench judging: PyTorch eager and ``torch.compile`` of the reference,
each in trusted runners of their own, timed after the candidate (trusted code).

:func:`time_session` times the candidate's batches (kb_timing.py), checks it once more, ends its
runner, then times the reference through the same batches in a runner that only ever holds the
reference: no candidate process exists while a baseline runs. Eager runners are kept across
judgings (:data:`REFERENCE_RUNNERS`).

The ``compile`` baseline is ``torch.compile`` of the reference in one more trusted runner, lent
the worker's compile cache (evaluator_workers/gpu/compile_cache.py: a later device process
compiles the same reference from it, and no candidate runner reaches it). The judge times the
request that compiles it (``torch.compile`` and the compiled model's first call, on fresh
inputs: ``compile_seconds``, wall seconds, never mixed into a per-call time), then its batches
as eager's. It does not depend on the candidate, so its figures, or the one line saying why it
failed (some references do not compile), are kept per reference hash, device, batch and runner
pool for the life of the process: one compile per problem and device process. A failed compile
is a note of the reply (``compile_error``), never the candidate's failure: the candidate is
judged against eager.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from codevolve.evaluator_workers.gpu.remote import (
    CandidateProblem,
    LoadFailed,
    Remote,
    start_remote,
)
from codevolve.evaluator_workers.gpu.shared_tensors import Arena
from codevolve.problems.kernelbench.device.kb_inputs import (
    KERNELBENCH,
    ReferenceFailure,
    construct,
    draw_inputs,
    init_inputs,
    judge_random,
)
from codevolve.problems.kernelbench.device.kb_role import ROLE
from codevolve.problems.kernelbench.device.kb_timing import (
    TIMING_SEED_OFFSET,
    CompiledBaseline,
    Session,
    median,
    summary,
    timed_batches,
)

COMPILE_FAILED = "compile baseline failed"  # a failed baseline's note, before its one line of why

# (reference hash, device, batch, runner pool) -> its compile baseline in this process
_COMPILED: dict[tuple[Any, ...], CompiledBaseline] = {}


def time_session(session: Session) -> dict[str, Any]:
    """Time the candidate (its runner), then the reference (a runner of its own)."""
    remote = session.remote
    assert remote is not None
    ours = timed_batches(session, remote, check=True)
    # One more checked call: a candidate that changes after many calls shows it here.
    rng = judge_random(
        session.seed + 2 * TIMING_SEED_OFFSET, KERNELBENCH, session.device, salt=session.salt
    )
    after = session.checked_round(
        draw_inputs(session.reference, KERNELBENCH, session.seed, rng), KERNELBENCH
    )
    if after:
        raise CandidateProblem(f"after the timed rounds: {after}")
    remote.close()
    session.remote = None
    eager, compiled = _time_reference(session)
    return summary(ours, eager, compiled, batch=session.batch).as_dict()


class _ReferenceRunners:
    """Runners that time references, kept across judgings: each holds one reference, built
    under one seed, with its own arena, and never a candidate. Reusing them spares a process
    start per judging; the few most recent are kept, fewer on a GPU whose memory runs short
    (each holds its arena and its last batch's outputs: gigabytes on large problems)."""

    KEEP = 4
    FREE_SHARE = 0.5  # on CUDA, older runners end while less than this share of memory is free

    def __init__(self) -> None:
        self._remotes: dict[tuple[Any, ...], Remote] = {}

    def get(self, session: Session) -> Remote:
        key = (
            session.reference.digest,
            session.seed,
            session.device,
            session.batch,
            id(session.runners),
        )
        remote = self._remotes.pop(key, None)
        if remote is None or not remote.runner.alive():
            if remote is not None:
                remote.close(arena=True)
            while self._remotes and (
                len(self._remotes) >= self.KEEP or _memory_short(session.device, self.FREE_SHARE)
            ):
                self._remotes.pop(next(iter(self._remotes))).close(arena=True)
            remote = start_reference(session)
        self._remotes[key] = remote  # the most recent last
        return remote

    def make_room(self, device: str, *, keep: str) -> None:
        """End the runners of other references, oldest first, while the GPU's memory runs
        short (before a judging stages its inputs)."""
        for key in [k for k in self._remotes if k[0] != keep]:
            if not _memory_short(device, self.FREE_SHARE):
                return
            self._remotes.pop(key).close(arena=True)

    def drop(self, session: Session) -> None:
        for key in [k for k in self._remotes if k[0] == session.reference.digest]:
            self._remotes.pop(key).close(arena=True)

    def close(self) -> None:
        while self._remotes:
            self._remotes.popitem()[1].close(arena=True)


def _memory_short(device: str, share: float) -> bool:
    """Whether less than ``share`` of the GPU's memory is free (never on the CPU)."""
    if device != "cuda":
        return False
    free, total = torch.cuda.mem_get_info()
    return free < share * total


REFERENCE_RUNNERS = _ReferenceRunners()


def start_reference(session: Session, *, compiles: bool = False) -> Remote:
    """A trusted runner holding the reference built under the session's seed, with an arena of
    its own (``compiles``: lent the compile cache, for the ``compile`` baseline)."""
    assert session.arena is not None
    arena = Arena.create(session.arena.raw.numel(), session.device)
    try:
        remote = start_remote(
            session.runners,
            arena,
            session.reference_source,
            trusted=True,
            role=ROLE,
            who="Model",
            compiles=compiles,
        )
    except BaseException:
        arena.close()
        raise
    try:
        construct(
            remote, session.seed, init_inputs(session.reference, session.seed, session.device)
        )
    except BaseException:
        remote.close(arena=True)
        raise
    return remote


def _time_reference(session: Session) -> tuple[list[float], CompiledBaseline | None]:
    try:
        remote = REFERENCE_RUNNERS.get(session)
        eager = timed_batches(session, remote, check=False)
    except CandidateProblem as exc:
        REFERENCE_RUNNERS.drop(session)
        raise ReferenceFailure(f"timing Model: {exc}") from None
    if "compile" not in session.settings.baselines:
        return eager, None
    key = (session.reference.digest, session.device, session.batch, id(session.runners))
    if key not in _COMPILED:
        REFERENCE_RUNNERS.drop(session)  # its memory back first: the compiled one needs as much
        _COMPILED[key] = _compile_baseline(session)
    return eager, _COMPILED[key]


def _compile_baseline(session: Session) -> CompiledBaseline:
    """``torch.compile`` of the reference in a trusted runner of its own: the seconds its
    compiling took (until it failed, if it did), then its batches timed as eager's; a failure
    is the baseline's note, and the candidate is still judged against eager."""
    try:
        remote = start_reference(session, compiles=True)
    except (CandidateProblem, LoadFailed) as exc:
        return CompiledBaseline(None, None, error=_failed(exc))
    seconds = None
    try:
        message = {"op": "compile", "rounds": [{"inputs": _fresh_inputs(session, remote)}]}
        started = time.perf_counter()
        try:
            reply = remote.ask(message)
        finally:
            seconds = time.perf_counter() - started
        ms = median(timed_batches(session, remote, check=False))
        return CompiledBaseline(ms, seconds, _cache_state(reply))
    except CandidateProblem as exc:
        return CompiledBaseline(None, seconds, error=_failed(exc))
    finally:
        remote.close(arena=True)


def _fresh_inputs(session: Session, remote: Remote) -> list[Any]:
    """One set of inputs drawn anew, staged in the runner's arena: what its first call, the
    one that compiles, runs on."""
    rng = judge_random(
        session.seed + 3 * TIMING_SEED_OFFSET, KERNELBENCH, session.device, salt=session.salt
    )
    remote.arena.reset()
    encoded, _staged = remote.stage(draw_inputs(session.reference, KERNELBENCH, session.seed, rng))
    return encoded


def _cache_state(reply: dict[str, Any]) -> str:
    """Whether Inductor's FX graph cache held the compiled graphs: "hit", "miss", "partial"
    (some of each), or "" (it says nothing: no graph, or a cache turned off)."""
    counts = reply.get("fx_graph_cache")
    hits = counts.get("hits") if isinstance(counts, dict) else None
    misses = counts.get("misses") if isinstance(counts, dict) else None
    if type(hits) is not int or type(misses) is not int or hits + misses == 0:
        return ""
    return "partial" if hits and misses else "hit" if hits else "miss"


def _failed(exc: Exception) -> str:
    """The note of a failed baseline: one line (a runner's traceback shortened to its last)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or ["no reason"]
    first, traceback, _ = lines[0].partition("Traceback (most recent call last):")
    line = f"{first}{lines[-1]}" if traceback else first
    return f"{COMPILE_FAILED}: {line[:300]}"
