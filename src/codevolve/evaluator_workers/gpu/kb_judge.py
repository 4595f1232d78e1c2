"""The trusted judge of KernelBench-format problems: does ``ModelNew`` compute what the user's
``Model`` computes, and how fast?

:func:`judge` loads both programs (kb_loader.py: the candidate refused first by the source rules,
then run with a small builtins table) and, for every seed:

- constructs both models as KernelBench does: ``torch.manual_seed(seed)`` before ``Model(*init)``
  and again before ``ModelNew(*init)``, each with its own copy of ``get_init_inputs()`` (a
  candidate that zeroes a shared weight cannot make both agree), on ``device``, in training
  mode as constructed (no ``eval()``: a BatchNorm reference normalises by batch statistics);
- for every distribution (kb_inputs.py) calls the candidate, then the reference on copies of
  the same inputs, and compares (kb_compare.py); then refills the same input tensors with fresh
  values and does it again (an output cached by call or by input address is now stale);
- around each candidate call watches its side effects (kb_watch.py): inputs written, the
  reference's parameters changed, threads, torch's namespaces and switches, forbidden aten
  operators; and poisons freed memory first.

A verdict per distribution is "" (right), ``skipped: ...`` (the reference itself is not finite
there; never for ``kernelbench``), or what was wrong. Hostile behaviour, or a candidate that
raises, ends the judging as the reply's ``problem``. A correct candidate is then timed
(kb_timing.py). Everything runs under ``torch.no_grad()``. Errors that outlive the judging are
not results: a broken CUDA context, or a candidate that tampered with the process
(:class:`~codevolve.evaluator_workers.gpu.kb_watch.TamperedProcess`), propagate, and the device
process recycles itself.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from codevolve.evaluator_workers.gpu.cuda_device import cuda_device_info
from codevolve.evaluator_workers.gpu.kb_compare import (
    aliased_input,
    all_finite,
    compare,
    deferred_check,
    tensors_of,
)
from codevolve.evaluator_workers.gpu.kb_inputs import (
    DISTRIBUTIONS,
    KERNELBENCH,
    JudgeRandom,
    ReferenceFailure,
    draw_inputs,
    init_inputs,
    judge_random,
    refill,
)
from codevolve.evaluator_workers.gpu.kb_loader import KbLoader, LoadError, ReferenceProgram
from codevolve.evaluator_workers.gpu.kb_timing import (
    clock_for,
    summary,
    time_against_eager,
    time_compiled,
)
from codevolve.evaluator_workers.gpu.kb_watch import (
    CandidateProblem,
    OpRecorder,
    ProcessState,
    TamperedProcess,
    byte_sizes,
    changed_input,
    changed_state,
    copies,
    new_threads,
    poison,
    raise_if_context_broken,
    state_of,
)

SKIPPED = "skipped"
NOT_JUDGED = "not judged"
BASELINES = ("eager", "compile")
MESSAGE_CHARS = 300  # of a candidate's exception message
TIMING_SEED_OFFSET = 7919  # the timed rounds' generator differs from every checked one


@dataclass(frozen=True, slots=True)
class JudgeSettings:
    """How a candidate is judged (the ``kb.judge`` payload, validated by kb_jobs.py)."""

    seeds: tuple[int, ...] = (0,)
    trials: int = 20  # timed rounds
    warmup: int = 3  # untimed rounds first
    distributions: tuple[str, ...] = DISTRIBUTIONS
    forbid: tuple[str, ...] = ()  # aten operators the candidate may not run: "aten.mm"
    baselines: tuple[str, ...] = ("eager",)  # "compile" adds torch.compile of the reference
    time: bool = True
    tolerance: float | None = None  # atol = rtol for every float output; None: by dtype


def judge(
    reference: str, candidate: str, settings: JudgeSettings, *, device: str, loader: KbLoader
) -> dict[str, Any]:
    """Judge ``candidate`` against ``reference`` on ``device`` ("cuda" or "cpu"); plain data."""
    reply = _new_reply(device, settings)
    seconds = reply["seconds"]
    mark = time.perf_counter()
    with torch.no_grad():
        session = _load(reference, candidate, settings, device, loader, reply)
        seconds["load"], mark = _since(mark)
        if session is None:
            return reply
        try:
            session.check()
            seconds["check"], mark = _since(mark)
            if settings.time and session.correct():
                reply["timing"] = session.timing()
                seconds["time"], mark = _since(mark)
        except CandidateProblem as exc:
            reply["problem"] = str(exc)
        except ReferenceFailure as exc:
            reply["load_error"] = f"reference: {exc}"
        session.report(reply)
    return reply


def _since(mark: float) -> tuple[float, float]:
    """Seconds since ``mark``, and the new mark."""
    now = time.perf_counter()
    return now - mark, now


def _load(
    reference: str,
    candidate: str,
    settings: JudgeSettings,
    device: str,
    loader: KbLoader,
    reply: dict[str, Any],
) -> _Session | None:
    ref = loader.reference(reference)
    if isinstance(ref, LoadError):
        reply["load_error"] = ref.message
        return None
    state = ProcessState()  # before the candidate's module runs: it may patch torch at import
    loaded = loader.candidate(candidate)
    state.check("loading the program")
    if isinstance(loaded, LoadError):
        reply["load_error"] = loaded.message
        return None
    return _Session(ref, loaded.model_new, settings, device, state)


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
        "seconds": {"load": 0.0, "check": 0.0, "time": 0.0},
    }


def device_info(device: str) -> dict[str, Any]:
    if device == "cuda":
        return {"type": "cuda", **cuda_device_info()}
    name = platform.processor() or platform.machine()
    return {
        "type": "cpu",
        "name": name,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


class _Session:
    """One judging: the two programs, the models of the current seed, what was seen so far."""

    def __init__(
        self,
        reference: ReferenceProgram,
        model_new: Callable[..., Any],
        settings: JudgeSettings,
        device: str,
        state: ProcessState,
    ) -> None:
        self.reference = reference
        self.model_new = model_new
        self.settings = settings
        self.device = device
        self.state = state
        self.results: dict[str, list[tuple[int, str]]] = {d: [] for d in settings.distributions}
        self.ops: set[str] = set()
        self.max_abs_error = 0.0
        self.sizes: set[int] = set()  # bytes of inputs and reference outputs: poisoned blocks
        self.ref_model: torch.nn.Module = torch.nn.Module()
        self.cand_model: torch.nn.Module = torch.nn.Module()
        # The timed rounds' inputs, their copies for the reference, and the threads before.
        self.round_inputs: list[Any] = []
        self.round_reference_inputs: list[Any] = []
        self.round_threads: set[threading.Thread] = set()
        self.round_random: JudgeRandom | None = None

    # -- checking ---------------------------------------------------------------------------

    def check(self) -> None:
        for seed in self.settings.seeds:
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
        reply["ops"] = sorted(self.ops)

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
        model = self._reference_call("constructing Model", self.reference.model, copies(init))
        self.ref_model = model.to(self.device)
        torch.manual_seed(seed)
        built = self._candidate_call("constructing ModelNew", self.model_new, copies(init))
        if not isinstance(built, torch.nn.Module):
            raise CandidateProblem("ModelNew(...) is not a torch.nn.Module")
        self.cand_model = built
        self._candidate_call(
            "moving ModelNew to the device", torch.nn.Module.to, [built, self.device]
        )
        self.state.check("constructing ModelNew")

    def _verdict(self, distribution: str, seed: int) -> str:
        rng = judge_random(seed, distribution, self.device)
        inputs = draw_inputs(self.reference, distribution, seed, rng)
        first = self._checked_round(inputs, distribution)
        if first:
            return first
        refill(inputs, self.reference, distribution, rng)
        second = self._checked_round(inputs, distribution)
        if second and not second.startswith(SKIPPED):
            return f"after new values in the same input tensors: {second}"
        return second

    def _checked_round(self, inputs: list[Any], distribution: str) -> str:
        saved = copies(inputs)  # what the candidate was given; then the reference's inputs
        reference_state = state_of(self.ref_model)
        output = self._run(inputs, checked=True)
        written = changed_input(inputs, saved)
        if written is not None:
            raise CandidateProblem(f"ModelNew wrote into input {written}")
        changed = changed_state(self.ref_model, reference_state)
        if changed:
            raise CandidateProblem(f"a ModelNew call changed the reference model's {changed}")
        expected = self._reference_call("running Model", self.ref_model, saved)
        self.sizes |= byte_sizes(tensors_of(expected))
        if distribution != KERNELBENCH and not all_finite(expected):
            return f"{SKIPPED}: the reference's own output is not finite on {distribution} inputs"
        alias = aliased_input(output, inputs)
        if alias is not None and aliased_input(expected, saved) is None:
            raise CandidateProblem(f"ModelNew returned input {alias} (or a view of it)")
        scaled = distribution != KERNELBENCH
        result = compare(output, expected, self.settings.tolerance, scaled=scaled)
        self.max_abs_error = max(self.max_abs_error, result.max_abs_error)
        return result.problem

    def _run(self, inputs: Sequence[Any], *, checked: bool) -> Any:
        """One forward call of the candidate. Checked calls poison freed memory first (timed
        ones have it done before their clock starts), record the aten operators, and check the
        process afterwards."""
        if not checked:
            return self._candidate_call("ModelNew", self.cand_model, inputs)
        self.sizes |= byte_sizes(inputs)
        poison(self.sizes, self.device, release=True)
        recorder = OpRecorder()
        with recorder:
            output = self._candidate_call("ModelNew", self.cand_model, inputs)
        self.ops |= recorder.ops
        forbidden = recorder.forbidden(self.settings.forbid)
        if forbidden:
            raise CandidateProblem(f"ModelNew ran {forbidden}, which this problem forbids")
        self.state.check("a ModelNew call")
        return output

    def _candidate_call(self, what: str, function: Callable[..., Any], args: Sequence[Any]) -> Any:
        try:
            return function(*args)
        except Exception as exc:  # noqa: BLE001 - the candidate's error is its result
            raise_if_context_broken(self.device)
            lines = str(exc).strip().splitlines() or [""]
            message = f"{what} raised {type(exc).__name__}: {lines[0][:MESSAGE_CHARS]}"
            raise CandidateProblem(message) from None

    def _reference_call(self, what: str, function: Callable[..., Any], args: Sequence[Any]) -> Any:
        try:
            return function(*args)
        except Exception as exc:  # the user's reference: its bug is reported
            raise_if_context_broken(self.device)
            raise ReferenceFailure(f"{what} raised {type(exc).__name__}: {exc}") from exc

    # -- timing (kb_timing.TimedProblem) ------------------------------------------------------

    def timing(self) -> dict[str, Any]:
        seed = self.settings.seeds[-1] + TIMING_SEED_OFFSET
        self.round_random = judge_random(seed, KERNELBENCH, self.device)
        self.round_inputs = draw_inputs(self.reference, KERNELBENCH, seed, self.round_random)
        clock = clock_for(self.device)
        trials, warmup = self.settings.trials, self.settings.warmup
        ours, eager, wrong = time_against_eager(self, clock, trials=trials, warmup=warmup)
        if wrong:
            raise CandidateProblem(wrong)
        self.state.check("the timed rounds")
        # One more checked call: a candidate that changes after many calls (an op it may not
        # run, a cache) shows it here.
        refill(self.round_inputs, self.reference, KERNELBENCH, self.round_random)
        after = self._checked_round(self.round_inputs, KERNELBENCH)
        if after:
            raise CandidateProblem(f"after the timed rounds: {after}")
        compiled, why = None, ""
        if "compile" in self.settings.baselines:
            key = (self.reference.digest, self.device, _signature(self.round_inputs))
            compiled, why = time_compiled(
                key, self.ref_model, self, clock, trials=trials, warmup=warmup
            )
        return summary(ours, eager, compiled, why).as_dict()

    def prepare_round(self) -> None:
        assert self.round_random is not None
        refill(self.round_inputs, self.reference, KERNELBENCH, self.round_random)
        self.round_reference_inputs = copies(self.round_inputs)
        self.round_threads = set(threading.enumerate())
        poison(self.sizes, self.device)

    def run_candidate(self) -> Any:
        return self._run(self.round_inputs, checked=False)

    def run_reference(self, model: Callable[..., Any] | None = None) -> Any:
        module = self.ref_model if model is None else model
        return self._reference_call("running Model", module, self.round_reference_inputs)

    def check_later(self, held: Any, expected: Any) -> Callable[[], str]:
        threads = new_threads(self.round_threads)
        if threads:
            raise TamperedProcess(f"a timed ModelNew call left a thread running ({threads[0]})")
        return deferred_check(held, expected, self.settings.tolerance)


def _signature(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(
        (tuple(v.shape), str(v.dtype)) if isinstance(v, torch.Tensor) else repr(v) for v in values
    )
