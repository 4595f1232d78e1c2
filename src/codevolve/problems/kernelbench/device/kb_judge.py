"""The trusted judge of KernelBench-format problems: does ``ModelNew`` compute what the user's
``Model`` computes, and how fast?

The judge never runs the candidate. It runs in the device process and holds everything a
candidate would want to forge: the reference model, the inputs, the comparison and the clock.
The candidate runs in a runner (runner.py), a throw-away caged process of its own, started ahead
of need by a :class:`~codevolve.evaluator_workers.gpu.runner_link.RunnerPool` and ended after
this one judging. Tensors cross as descriptions of shared memory (shared_tensors.py), replies as
capped JSON.

:func:`judge` loads the reference here (the user's trusted file) and, for every seed:

- has the runner build ``ModelNew`` as KernelBench does (``torch.manual_seed(seed)`` before
  ``ModelNew(*init)``, with its own copy of ``get_init_inputs()``), as the judge builds
  ``Model`` here;
- for every distribution (kb_inputs.py; seeds salted with a secret of this judging) computes
  the reference's output here on private copies, stages the inputs in shared memory, has the
  runner call the candidate, reads the candidate's output from memory and compares
  (kb_compare.py); checks the staged inputs against the private copies; then refills the inputs
  with fresh values and does it again (an output cached by call or by address is now stale).

A verdict per distribution is "" (right), ``skipped: ...`` (the reference itself is not finite
there; never for ``kernelbench``), or what was wrong. A candidate that raises, breaks the
protocol or dies ends the judging as the reply's ``problem``. A correct candidate is then timed
(kb_timing.py) by the judge's clock, and the baselines (eager, ``torch.compile``) through the
same path in runners of their own after the candidate's runner has ended (kb_baselines.py).

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from codevolve.core.kernel_rules import check_model_new
from codevolve.evaluator_workers.gpu.cuda_device import device_info
from codevolve.evaluator_workers.gpu.judging import BATCH_TARGET_MS, MAX_BATCH
from codevolve.evaluator_workers.gpu.remote import (
    CandidateProblem,
    LoadFailed,
    Misplaced,
    Remote,
    start_remote,
)
from codevolve.evaluator_workers.gpu.runner_link import RunnerPool
from codevolve.evaluator_workers.gpu.shared_tensors import Arena, SharingError, byte_count
from codevolve.problems.kernelbench.device.kb_baselines import REFERENCE_RUNNERS, time_session
from codevolve.problems.kernelbench.device.kb_compare import aliased_input, all_finite, compare
from codevolve.problems.kernelbench.device.kb_inputs import (
    DISTRIBUTIONS,
    KERNELBENCH,
    ReferenceFailure,
    construct,
    draw_inputs,
    init_inputs,
    judge_random,
    refill,
)
from codevolve.problems.kernelbench.device.kb_loader import KbLoader, LoadError, ReferenceProgram
from codevolve.problems.kernelbench.device.kb_precision import fp32_in_fp32
from codevolve.problems.kernelbench.device.kb_role import ROLE
from codevolve.problems.kernelbench.device.kb_watch import (
    changed_input,
    copies,
    forbidden_ran,
    raise_if_context_broken,
)

SKIPPED = "skipped"
NOT_JUDGED = "not judged"
BASELINES = ("eager", "compile")
ARENA_CAP = {"cuda": 4 << 30, "cpu": 1 << 30}  # bytes of staged batches (one set always fits)


@dataclass(frozen=True, slots=True)
class JudgeSettings:
    """How a candidate is judged (the ``kb.judge`` payload, validated by kb_jobs.py)."""

    seeds: tuple[int, ...] = (0,)
    trials: int = 20  # timed batches
    warmup: int = 3  # untimed batches first
    distributions: tuple[str, ...] = DISTRIBUTIONS
    forbid: tuple[str, ...] = ()  # aten operators the candidate may not run: "aten.mm"
    baselines: tuple[str, ...] = ("eager",)  # "compile" adds torch.compile of the reference
    time: bool = True
    tolerance: float | None = None  # atol = rtol for every float output; None: by dtype


def judge(
    reference: str,
    candidate: str,
    settings: JudgeSettings,
    *,
    device: str,
    loader: KbLoader,
    runners: RunnerPool,
) -> dict[str, Any]:
    """Judge ``candidate`` against ``reference`` on ``device`` ("cuda" or "cpu"); plain data."""
    fp32_in_fp32()  # the reference computed here: no TF32 (kb_precision.py)
    reply = _new_reply(device, settings)
    seconds = reply["seconds"]
    mark = time.perf_counter()
    with torch.no_grad():
        ref = loader.reference(reference)
        if isinstance(ref, LoadError):
            reply["load_error"] = ref.message
            return reply
        refused = check_model_new(candidate) if runners.settings.rules else ""
        if refused:
            reply["load_error"] = refused
            return reply
        session = Session(ref, candidate, settings, device, runners)
        session.reference_source = reference
        try:
            session.check()
            seconds["check"], mark = _since(mark)
            if settings.time and session.correct():
                reply["timing"] = time_session(session)
                seconds["time"], mark = _since(mark)
        except LoadFailed as exc:
            reply["load_error"] = str(exc)
        except CandidateProblem as exc:
            reply["problem"] = str(exc)
        except ReferenceFailure as exc:
            reply["load_error"] = f"reference: {exc}"
        finally:
            session.close()
        session.report(reply)
    return reply


def _since(mark: float) -> tuple[float, float]:
    now = time.perf_counter()
    return now - mark, now


def _new_reply(device: str, settings: JudgeSettings) -> dict[str, Any]:
    return {
        "device": device_info(device),
        "load_error": "",
        "problem": "",
        "verdicts": dict.fromkeys(settings.distributions, NOT_JUDGED),
        "correct": False,
        "correct_kernelbench": False,
        "max_abs_error": 0.0,
        "ops": [],
        "timing": None,
        "isolation": {},
        "seconds": {"load": 0.0, "check": 0.0, "time": 0.0},
    }


class Session:
    """One judging: the reference here, the candidate in its runner, what was seen so far."""

    def __init__(
        self,
        reference: ReferenceProgram,
        candidate: str,
        settings: JudgeSettings,
        device: str,
        runners: RunnerPool,
    ) -> None:
        self.reference = reference
        self.candidate = candidate
        self.settings = settings
        self.device = device
        self.runners = runners
        self.salt = secrets.randbits(60)  # the inputs' secret
        self.results: dict[str, list[tuple[int, str]]] = {d: [] for d in settings.distributions}
        self.ops: set[str] = set()
        self.max_abs_error = 0.0
        self.ref_model: torch.nn.Module = torch.nn.Module()
        self.remote: Remote | None = None
        self.arena: Arena | None = None
        self.batch = 1  # calls per timed batch, from the reference's time here
        self.layers: dict[str, bool] = {}
        self.seed = settings.seeds[0]
        self.reference_source = ""  # the reference's text, for the runner that times it

    # -- checking ---------------------------------------------------------------------------

    def check(self) -> None:
        for seed in self.settings.seeds:
            self.seed = seed
            self._construct(seed)
            for distribution in self.settings.distributions:
                verdict = self._verdict(distribution, seed)
                self.results[distribution].append((seed, verdict))

    def correct(self) -> bool:
        verdicts = [self._merged(d) for d in self.settings.distributions]
        judged = [v for v in verdicts if not v.startswith(SKIPPED)]
        return bool(judged) and all(v == "" for v in judged)

    def report(self, reply: dict[str, Any]) -> None:
        for distribution in self.settings.distributions:
            if self.results[distribution]:
                reply["verdicts"][distribution] = self._merged(distribution)
        clean = not reply["problem"] and not reply["load_error"]
        reply["correct"] = clean and self.correct()
        reply["correct_kernelbench"] = clean and reply["verdicts"].get(KERNELBENCH) == ""
        reply["max_abs_error"] = self.max_abs_error
        reply["ops"] = sorted(op for op in self.ops if op.count(".") == 1)
        reply["isolation"] = self.layers

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
            self.remote = None
        if self.arena is not None:
            self.arena.close()
            self.arena = None
        if self.device == "cuda":
            # What this judging cached (inputs, the reference's outputs: gigabytes on large
            # problems) goes back to the device, for the next judging's runners.
            self.ref_model = torch.nn.Module()
            torch.cuda.empty_cache()

    def _merged(self, distribution: str) -> str:
        results = self.results[distribution]
        failures = [(s, v) for s, v in results if v and not v.startswith(SKIPPED)]
        if failures:
            seed, verdict = failures[0]
            return f"seed {seed}: {verdict}" if len(self.settings.seeds) > 1 else verdict
        if any(v == "" for _, v in results):
            return ""
        return results[0][1] if results else NOT_JUDGED

    def _construct(self, seed: int) -> None:
        init = init_inputs(self.reference, seed, self.device)
        torch.manual_seed(seed)
        model = self.reference_call("constructing Model", self.reference.model, copies(init))
        self.ref_model = model.to(self.device)
        if self.remote is None:
            self._start(init)
        assert self.remote is not None
        construct(self.remote, seed, init)

    def _start(self, init: list[Any]) -> None:
        """The arena, sized for the timed batches (from the reference's time here), and the
        candidate's runner."""
        rng = judge_random(self.seed, KERNELBENCH, self.device, salt=self.salt)
        inputs = draw_inputs(self.reference, KERNELBENCH, self.seed, rng)
        expected = self.reference_call("running Model", self.ref_model, copies(inputs))  # warm
        took_ms = float("inf")
        for _ in range(3):  # the fastest of three warm calls: a cold first call is slower
            started = self._clock()
            self.reference_call("running Model", self.ref_model, copies(inputs))
            took_ms = min(took_ms, max((self._clock() - started) * 1e3, 1e-3))
        one_set = byte_count(inputs) + (byte_count(expected) if self.device == "cpu" else 0)
        cap = ARENA_CAP[self.device]
        target = math.ceil(BATCH_TARGET_MS[self.device] / took_ms)
        self.batch = max(1, min(MAX_BATCH[self.device], target, cap // one_set))
        size = max(self.batch * one_set, byte_count(init) + one_set)
        REFERENCE_RUNNERS.make_room(self.device, keep=self.reference.digest)
        try:
            self.arena = Arena.create(size, self.device)
        except SharingError as exc:
            raise ReferenceFailure(
                f"the problem's inputs ({size / 2**30:.1f} GiB staged) do not fit: {exc}"
            ) from None
        self.remote = start_remote(
            self.runners, self.arena, self.candidate, trusted=False, role=ROLE, who="ModelNew"
        )
        self.layers = self.remote.layers

    def _clock(self) -> float:
        if self.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    def _verdict(self, distribution: str, seed: int) -> str:
        rng = judge_random(seed, distribution, self.device, salt=self.salt)
        inputs = draw_inputs(self.reference, distribution, seed, rng)
        first = self.checked_round(inputs, distribution)
        if first:
            return first
        refill(inputs, self.reference, distribution, rng)
        second = self.checked_round(inputs, distribution)
        if second and not second.startswith(SKIPPED):
            return f"after new values in the same input tensors: {second}"
        return second

    def checked_round(self, inputs: list[Any], distribution: str) -> str:
        remote = self.remote
        assert remote is not None
        expected = self.reference_call("running Model", self.ref_model, copies(inputs))
        if distribution != KERNELBENCH and not all_finite(expected):
            return f"{SKIPPED}: the reference's own output is not finite on {distribution} inputs"
        remote.arena.reset()
        encoded, staged = remote.stage(inputs)
        specs, slots = remote.slots(expected)
        reply = remote.ask({"op": "call", "rounds": [{"inputs": encoded, "slots": specs}]})
        ops = reply.get("ops", [])
        if isinstance(ops, list):
            self.ops |= {str(op)[:100] for op in ops[:1000]}
        forbidden = forbidden_ran(self.ops, self.settings.forbid)
        if forbidden:
            raise CandidateProblem(forbidden)
        written = changed_input(staged, inputs)
        if written is not None:
            raise CandidateProblem(f"ModelNew wrote into input {written}")
        outputs = reply.get("outputs")
        if not isinstance(outputs, list) or len(outputs) != 1:
            raise CandidateProblem("the ModelNew process answered a call without its output")
        alias = (reply.get("aliases") or [-1])[0]
        if type(alias) is int and alias >= 0 and aliased_input(expected, inputs) is None:
            # The runner's own report (a filter): a clone of the input fares as any output.
            raise CandidateProblem(f"ModelNew returned input {alias} (or a view of it)")
        try:
            output = remote.output(outputs[0], slots)
        except Misplaced as exc:
            return f"output: on {exc}, the reference's on {self.device}"
        scaled = distribution != KERNELBENCH
        result = compare(output, expected, self.settings.tolerance, scaled=scaled)
        self.max_abs_error = max(self.max_abs_error, result.max_abs_error)
        return result.problem

    def reference_call(self, what: str, function: Callable[..., Any], args: Sequence[Any]) -> Any:
        try:
            return function(*args)
        except Exception as exc:  # the user's reference: its bug is reported
            raise_if_context_broken(self.device)
            raise ReferenceFailure(f"{what} raised {type(exc).__name__}: {exc}") from exc
