"""The timed batches of a KernelBench judging, and the figures they give (trusted code).

Only a candidate correct under every distribution is timed, and only by the judge's clock: the
candidate's runner can neither read nor stop it. The runner is stopped (SIGSTOP) whenever it is
not being timed or asked something. A timed batch:

1. the judge refills its private input sets with fresh values (the kernelbench distribution,
   seeds it draws in secret), copies them into the shared arena, poisons the output slots, and
   on CUDA flushes the L2 (a buffer of at least twice the L2 written) and waits for the device,
   all while the runner is stopped: no thread of it sees the inputs before the clock starts;
2. it sends ``go``, reads ``time.perf_counter()``, continues the runner, and reads the clock again
   when the runner's answer arrives. The runner has called the model on each of the batch's
   ``K`` input sets, waited for its device, and named its outputs;
3. it stops the runner again, copies a sample of the outputs (chosen after the answer, two per
   batch) out of the runner's memory and compares them with the reference's outputs on the same
   inputs, computed here. A wrong one fails the candidate, so an answer sent before the work
   was done is caught unless the work ends before the judge's copy runs.

``K`` (``Session.batch``) makes a batch last about ``BATCH_TARGET_MS`` by the reference's time,
measured here, so that the fixed cost of a batch (a signal, two socket messages, a device
synchronisation) stays small beside the calls (docs/security.md states the floor). The
baselines (eager, ``torch.compile``) are timed through the same batches, in trusted runners of
their own started after the candidate's runner has ended (kb_baselines.py).

Figures are medians per call in milliseconds, with the candidate's 10th and 90th percentiles.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import torch

from codevolve.core.measurement import quantile
from codevolve.evaluator_workers.gpu.remote import (
    REQUEST_TIMEOUT_S,
    CandidateProblem,
    Remote,
    poison,
)
from codevolve.evaluator_workers.gpu.runner_link import RunnerGone, RunnerPool
from codevolve.evaluator_workers.gpu.shared_tensors import Arena, tensors_in
from codevolve.problems.kernelbench.device.kb_compare import compare
from codevolve.problems.kernelbench.device.kb_inputs import (
    KERNELBENCH,
    draw_inputs,
    judge_random,
    refill,
)
from codevolve.problems.kernelbench.device.kb_loader import ReferenceProgram
from codevolve.problems.kernelbench.device.kb_watch import copies

FLUSH_MIN_BYTES = 256 << 20  # the L2 flush writes at least this much, and twice the L2
CHECKED_PER_BATCH = 2  # timed outputs compared per batch
TIMING_SEED_OFFSET = 7919  # the timed rounds' generator differs from every checked one


@dataclass(frozen=True, slots=True)
class CompiledBaseline:
    """``torch.compile`` of one reference in this process: its figures, or why it has none."""

    ms: float | None  # median per call; None when it failed
    seconds: float | None  # wall seconds of compiling: torch.compile and the first call
    cache: str = ""  # Inductor's FX graph cache: "hit", "miss", "partial", or "" (unknown)
    error: str = ""  # "compile baseline failed: <one line>"


@dataclass(frozen=True, slots=True)
class Timing:
    """Medians over the timed batches, per call, in milliseconds."""

    candidate_ms: float
    eager_ms: float
    compile_ms: float | None
    candidate_p10_ms: float
    candidate_p90_ms: float
    rounds: int  # timed batches
    batch: int = 1  # calls per batch
    compile_error: str = ""  # why torch.compile of the reference gave no figure
    compile_seconds: float | None = None  # wall seconds this process spent compiling it
    compile_cache: str = ""  # CompiledBaseline.cache

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Session(Protocol):
    """What the timed batches need of a judging (kb_judge.Session)."""

    reference: ReferenceProgram
    reference_source: str
    ref_model: torch.nn.Module
    settings: Any  # kb_judge.JudgeSettings
    device: str
    seed: int
    salt: int
    batch: int
    runners: RunnerPool
    arena: Arena | None
    remote: Remote | None

    def reference_call(self, what: str, function: Callable[..., Any], args: Sequence[Any]) -> Any:
        """The reference's call; ReferenceFailure if it raises."""

    def checked_round(self, inputs: list[Any], distribution: str) -> str:
        """A checked call of the candidate on ``inputs`` (its verdict, "" if right)."""


@functools.cache
def _flush_buffer() -> torch.Tensor:
    l2_bytes = int(torch.cuda.get_device_properties(0).L2_cache_size)
    return torch.empty(max(FLUSH_MIN_BYTES, 2 * l2_bytes) // 4, dtype=torch.int32, device="cuda")


class _Batches:
    """The timed batches' input sets: private here, staged in the arena, named to the runner."""

    def __init__(self, session: Session, remote: Remote) -> None:
        self.session = session
        self.remote = remote
        seed = session.seed + TIMING_SEED_OFFSET
        self.rng = judge_random(seed, KERNELBENCH, session.device, salt=session.salt)
        self.sets = [
            draw_inputs(session.reference, KERNELBENCH, seed, self.rng)
            for _ in range(session.batch)
        ]
        remote.arena.reset()
        rounds, self.staged, self.slots = [], [], []
        expected = session.reference_call("running Model", session.ref_model, copies(self.sets[0]))
        for values in self.sets:
            encoded, staged = remote.stage(values)
            specs, slots = remote.slots(expected)  # every set's output has the first one's shape
            rounds.append({"inputs": encoded, "slots": specs})
            self.staged.append(staged)
            self.slots.append(slots)
        remote.ask({"op": "stage", "rounds": rounds})  # descriptions only: the values come later
        remote.runner.pause()

    def refill(self) -> None:
        """Fresh values in the private sets, copied into the arena (the runner is stopped)."""
        for values, staged in zip(self.sets, self.staged, strict=True):
            refill(values, self.session.reference, KERNELBENCH, self.rng)
            for target, source in zip(tensors_in(staged), tensors_in(values), strict=True):
                target.copy_(source)
        for slots in self.slots:
            for slot in slots:
                poison(slot)
        if self.session.device == "cuda":
            _flush_buffer().zero_()
            torch.cuda.synchronize()

    def run(self) -> tuple[float, list[Any]]:
        """One timed batch: milliseconds per call, and the runner's output descriptions."""
        runner = self.remote.runner
        runner.send({"op": "go"})
        start = time.perf_counter()
        runner.resume()
        try:
            reply = _answer(self.remote)
        finally:
            end = time.perf_counter()
            if runner.alive():
                runner.pause()
        outputs = _outputs_of(reply, len(self.sets))
        if not isinstance(outputs, list) or len(outputs) != len(self.sets):
            raise CandidateProblem(
                f"the {self.remote.who} process answered a batch without its outputs"
            )
        return (end - start) * 1e3 / len(self.sets), outputs

    def check(self, outputs: list[Any], index: int, sampler: random.Random) -> str:
        """Compare a sample of a batch's outputs with the reference's ("" if right)."""
        picks = sorted(
            sampler.sample(range(len(self.sets)), min(CHECKED_PER_BATCH, len(self.sets)))
        )
        for pick in picks:
            output = self.remote.output(outputs[pick], self.slots[pick])
            expected = self.session.reference_call(
                "running Model", self.session.ref_model, copies(self.sets[pick])
            )
            result = compare(output, expected, self.session.settings.tolerance)
            if result.problem:
                return f"timed batch {index + 1}, call {pick + 1}: {result.problem}"
        return ""


def _outputs_of(reply: dict[str, Any], count: int) -> Any:
    """The per-output descriptions of a batch's answer, expanded from the short form a runner
    sends when all outputs are alike (runner.py ``_alike``); checked like any other."""
    alike = reply.get("alike")
    if not isinstance(alike, dict):
        return reply.get("outputs")
    facts, handles, places = alike.get("facts"), alike.get("handles"), alike.get("places")
    if not (isinstance(facts, dict) and isinstance(handles, list) and isinstance(places, list)):
        return None
    if len(places) != count or len(handles) > count:
        return None
    outputs = []
    for place in places:
        if not (isinstance(place, list) and len(place) == 2 and type(place[0]) is int):
            return None
        if not 0 <= place[0] < len(handles):
            return None
        outputs.append({"tensor": {**facts, "ipc": handles[place[0]], "offset": place[1]}})
    return outputs


def _answer(remote: Remote) -> dict[str, Any]:
    try:
        reply = remote.runner.receive(REQUEST_TIMEOUT_S)
    except RunnerGone as exc:
        raise CandidateProblem(f"the {remote.who} process failed: {exc}") from None
    if "problem" in reply:
        raise CandidateProblem(str(reply["problem"])[:2000])
    return reply


def timed_batches(session: Session, remote: Remote, *, check: bool) -> list[float]:
    """Milliseconds per call of ``settings.trials`` batches after ``settings.warmup``."""
    batches = _Batches(session, remote)
    sampler = random.Random(session.salt)
    times = []
    for index in range(session.settings.warmup + session.settings.trials):
        batches.refill()
        per_call, outputs = batches.run()
        if check:
            wrong = batches.check(outputs, index, sampler)
            if wrong:
                raise CandidateProblem(wrong)
        if index >= session.settings.warmup:
            times.append(per_call)
    remote.runner.resume()
    return times


def median(samples: Sequence[float]) -> float:
    return quantile(samples, 0.5)


def summary(
    candidate: Sequence[float],
    eager: Sequence[float],
    compiled: CompiledBaseline | None,
    *,
    batch: int = 1,
) -> Timing:
    return Timing(
        candidate_ms=median(candidate),
        eager_ms=median(eager),
        compile_ms=None if compiled is None else compiled.ms,
        candidate_p10_ms=quantile(candidate, 0.1),
        candidate_p90_ms=quantile(candidate, 0.9),
        rounds=len(candidate),
        batch=batch,
        compile_error="" if compiled is None else compiled.error,
        compile_seconds=None if compiled is None else compiled.seconds,
        compile_cache="" if compiled is None else compiled.cache,
    )
