"""Timing a KernelBench candidate against the eager reference and torch.compile (trusted code).

Only a candidate correct under every distribution is timed. On CUDA everything runs on a
dedicated judge stream, between CUDA events recorded on it: ``warmup`` rounds first, then
``trials`` rounds of

1. fresh values in the same input tensors (the kernelbench distribution, a fresh seed), clones
   of them for the reference, the allocator poisoned (kb_watch.poison);
2. an L2 flush (a buffer of at least twice the L2 written), the candidate between two events,
   and a copy of its output taken on the stream at once;
3. a flush, the eager reference between two events;
4. the copy compared with this round's reference output, on the stream, read after the rounds:
   a mismatch fails the candidate (a cached output, or work left on another stream that the
   copy did not wait for).

The candidate runs first in each round: while it runs, nothing in the process holds the round's
answer (no freed reference output for ``torch.empty`` to hand back, no live one for a kernel to
read by address). On the CPU the clock is ``time.perf_counter`` and there is no flush.

The ``compile`` baseline is ``torch.compile`` of the reference instance, timed alone in rounds
of its own after its warm-up (where it compiles); it does not depend on the candidate, so its
median is kept per reference hash, device and input shapes for the life of the process.
Figures are medians in milliseconds, with the candidate's 10th and 90th percentiles.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import torch

from codevolve.core.measurement import quantile
from codevolve.evaluator_workers.gpu.kb_watch import raise_if_context_broken

FLUSH_MIN_BYTES = 256 << 20  # the L2 flush writes at least this much, and twice the L2


@dataclass(frozen=True, slots=True)
class Timing:
    """Medians over the timed rounds, in milliseconds."""

    candidate_ms: float
    eager_ms: float
    compile_ms: float | None
    candidate_p10_ms: float
    candidate_p90_ms: float
    rounds: int
    compile_error: str = ""  # why torch.compile of the reference gave no figure

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class TimedProblem(Protocol):
    """What the judge provides for the timed rounds."""

    def prepare_round(self) -> None:
        """Fresh values in the inputs, clones for the reference, the allocator poisoned."""

    def run_candidate(self) -> Any: ...

    def run_reference(self, model: Callable[..., Any] | None = None) -> Any:
        """The reference instance (or ``model`` in its place) on this round's inputs."""

    def check_later(self, held: Any, expected: Any) -> Callable[[], str]:
        """Enqueue the comparison of a held output with the reference's; read it later."""


class Clock(Protocol):
    def context(self) -> contextlib.AbstractContextManager[Any]: ...
    def mark(self) -> Any: ...
    def flush(self) -> None: ...
    def settle(self) -> None: ...
    def elapsed_ms(self, start: Any, end: Any) -> float: ...


class CpuClock:
    def context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def mark(self) -> float:
        return time.perf_counter()

    def flush(self) -> None:
        """Nothing: CPU caches are not flushed (the reference and candidate alternate)."""

    def settle(self) -> None:
        """Nothing to wait for."""

    def elapsed_ms(self, start: float, end: float) -> float:
        return (end - start) * 1e3


class CudaClock:
    """The judge's stream, its events and the L2 flush buffer."""

    def __init__(self) -> None:
        l2_bytes = int(torch.cuda.get_device_properties(0).L2_cache_size)
        flush_bytes = max(FLUSH_MIN_BYTES, 2 * l2_bytes)
        self._flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
        self._stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]

    def context(self) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(self._stream)

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        event.record(self._stream)
        return event

    def flush(self) -> None:
        self._flush.zero_()

    def settle(self) -> None:
        self._stream.synchronize()

    def elapsed_ms(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return float(start.elapsed_time(end))


@functools.cache
def clock_for(device: str) -> Clock:
    """One clock per device for the process (the flush buffer is allocated once)."""
    return CudaClock() if device == "cuda" else CpuClock()


def time_against_eager(
    problem: TimedProblem, clock: Clock, *, trials: int, warmup: int
) -> tuple[list[float], list[float], str]:
    """The candidate's and the eager reference's times (ms) per round, and the first round
    whose output was wrong ("" if none)."""
    marks = []
    verdicts = []
    with clock.context():
        for _ in range(warmup):
            problem.prepare_round()
            problem.run_candidate()
            problem.run_reference()
        for _ in range(trials):
            problem.prepare_round()
            clock.flush()
            start = clock.mark()
            output = problem.run_candidate()
            end = clock.mark()
            held = _held(output)  # taken on the stream now: before work elsewhere is waited for
            clock.flush()
            ref_start = clock.mark()
            expected = problem.run_reference()
            ref_end = clock.mark()
            verdicts.append(problem.check_later(held, expected))
            marks.append((start, end, ref_start, ref_end))
        clock.settle()
    for index, verdict in enumerate(verdicts):
        wrong = verdict()
        if wrong:
            return [], [], f"timed round {index + 1}: {wrong}"
    ours = [clock.elapsed_ms(m[0], m[1]) for m in marks]
    eager = [clock.elapsed_ms(m[2], m[3]) for m in marks]
    return ours, eager, ""


_COMPILED_MS: dict[tuple[Any, ...], float] = {}  # (reference hash, device, shapes) -> median


def time_compiled(
    key: tuple[Any, ...],
    model: torch.nn.Module,
    problem: TimedProblem,
    clock: Clock,
    *,
    trials: int,
    warmup: int,
) -> tuple[float | None, str]:
    """The median time (ms) of ``torch.compile(model)`` on the problem's reference inputs, or
    None and why compiling failed. Cached by ``key`` for the process."""
    if key in _COMPILED_MS:
        return _COMPILED_MS[key], ""
    device = str(key[1])
    compiled = torch.compile(model)
    samples = []
    try:
        with clock.context():
            for _ in range(warmup + 1):  # the first call compiles
                problem.prepare_round()
                problem.run_reference(compiled)
            marks = []
            for _ in range(trials):
                problem.prepare_round()
                clock.flush()
                start = clock.mark()
                problem.run_reference(compiled)
                marks.append((start, clock.mark()))
            clock.settle()
        samples = [clock.elapsed_ms(start, end) for start, end in marks]
    except Exception as exc:  # noqa: BLE001 - a baseline that does not compile has no figure
        raise_if_context_broken(device)
        return None, f"torch.compile failed: {type(exc).__name__}: {str(exc)[:300]}"
    _COMPILED_MS[key] = median(samples)
    return _COMPILED_MS[key], ""


def _held(output: Any) -> Any:
    if isinstance(output, torch.Tensor):
        return output.clone()
    if isinstance(output, tuple | list):
        held = [v.clone() if isinstance(v, torch.Tensor) else v for v in output]
        return tuple(held) if isinstance(output, tuple) else held
    return output


def median(samples: Sequence[float]) -> float:
    return quantile(samples, 0.5)


def summary(
    candidate: Sequence[float], eager: Sequence[float], compiled: float | None, compile_error: str
) -> Timing:
    return Timing(
        candidate_ms=median(candidate),
        eager_ms=median(eager),
        compile_ms=compiled,
        candidate_p10_ms=quantile(candidate, 0.1),
        candidate_p90_ms=quantile(candidate, 0.9),
        rounds=len(candidate),
        compile_error=compile_error,
    )
