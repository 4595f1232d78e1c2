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
(kb_timing.py) by the judge's clock, and the reference through the same path in a runner of its
own after the candidate's runner has ended.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import math
import platform
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from codevolve.core.kernel_rules import check_model_new
from codevolve.evaluator_workers.gpu.cuda_device import cuda_device_info
from codevolve.evaluator_workers.gpu.kb_compare import aliased_input, all_finite, compare
from codevolve.evaluator_workers.gpu.kb_inputs import (
    DISTRIBUTIONS,
    KERNELBENCH,
    ReferenceFailure,
    draw_inputs,
    init_inputs,
    judge_random,
    refill,
)
from codevolve.evaluator_workers.gpu.kb_loader import KbLoader, LoadError, ReferenceProgram
from codevolve.evaluator_workers.gpu.kb_watch import (
    POISON_BYTE,
    CandidateProblem,
    changed_input,
    copies,
    forbidden_ran,
    raise_if_context_broken,
)
from codevolve.evaluator_workers.gpu.runner_link import Runner, RunnerGone, RunnerPool
from codevolve.evaluator_workers.gpu.shared_tensors import (
    Arena,
    CudaImports,
    SharingError,
    byte_count,
    decode,
    encode,
    tensors_in,
)

SKIPPED = "skipped"
NOT_JUDGED = "not judged"
BASELINES = ("eager", "compile")
REQUEST_TIMEOUT_S = 300.0  # one request to a runner: a first call may compile its kernels
# A timed batch runs at least this long, where memory allows: on CUDA a few times the batch's
# fixed cost (docs/security.md); on the CPU well above a busy machine's scheduling delays.
BATCH_TARGET_MS = {"cuda": 2.0, "cpu": 10.0}
MAX_BATCH = {"cuda": 256, "cpu": 16}  # calls in one timed batch (each on fresh inputs)
ARENA_CAP = {"cuda": 4 << 30, "cpu": 1 << 30}  # bytes of staged batches (one set always fits)


class LoadFailed(Exception):
    """The candidate did not load (its load_error)."""


class CageBroke(Exception):
    """A runner's device stopped working inside its cage (before any program loaded)."""

    def __init__(self, why: str, layers: list[str]) -> None:
        super().__init__(why)
        self.layers = layers


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
                from codevolve.evaluator_workers.gpu.kb_timing import time_session

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


class Remote:
    """One program in one runner, fed through one arena: the judge's handle on it."""

    def __init__(self, runner: Runner, arena: Arena, device: str, *, who: str) -> None:
        self.runner = runner
        self.arena = arena
        self.device = device
        self.who = who  # "ModelNew" or "Model": named in problems
        self.imports = CudaImports() if device == "cuda" else None
        self.layers: dict[str, bool] = {}

    def start(self, source: str, *, trusted: bool) -> None:
        fds = [] if self.arena.fd is None else [self.arena.fd]
        cache = self.runner.kernel_cache(source)
        message = {"op": "attach", "arena": self.arena.handle.as_json(), "cache": cache}
        reply = self.ask(message, fds=fds)
        if "cage_broke_device" in reply:
            raise CageBroke(str(reply["cage_broke_device"]), [str(x) for x in reply["layers"]])
        layers = reply.get("layers", {})
        self.layers = (
            {str(k): bool(v) for k, v in layers.items()} if isinstance(layers, dict) else {}
        )
        reply = self.ask({"op": "load", "source": source, "trusted": trusted})
        if "load_error" in reply:
            raise LoadFailed(str(reply["load_error"])[:2000])

    def construct(self, seed: int, init: list[Any]) -> None:
        self.arena.reset()
        self.ask({"op": "construct", "seed": seed, "init": self.stage(init)[0]})

    def ask(self, message: dict[str, Any], *, fds: Sequence[int] = ()) -> dict[str, Any]:
        """A request; a problem the program caused becomes :class:`CandidateProblem`."""
        try:
            reply = self.runner.request(message, timeout_s=REQUEST_TIMEOUT_S, fds=fds)
        except RunnerGone as exc:
            raise CandidateProblem(f"the {self.who} process failed: {exc}") from None
        if "problem" in reply:
            raise CandidateProblem(str(reply["problem"])[:2000])
        return reply

    def stage(self, values: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """Copy ``values`` into the arena: their descriptions, and the staged values."""
        staged: list[Any] = []

        def place(tensor: torch.Tensor) -> dict[str, Any]:
            slot, spec = self.arena.place(tensor)
            slot.copy_(tensor)
            staged.append(slot)
            return spec

        encoded = [encode(value, place) for value in values]
        resolved = iter(staged)
        return encoded, [_rebuild(value, resolved) for value in values]

    def slots(self, expected: Any) -> tuple[list[dict[str, Any]], list[torch.Tensor]]:
        """On the CPU, poisoned arena slots for the output's tensors (the runner copies its
        outputs there); on CUDA none (the judge maps the runner's own outputs)."""
        if self.device == "cuda":
            return [], []
        specs, tensors = [], []
        for tensor in tensors_in(expected):
            slot, spec = self.arena.place(tensor)
            slot.view(torch.uint8).fill_(POISON_BYTE) if slot.numel() else None
            specs.append(spec)
            tensors.append(slot)
        return specs, tensors

    def output(self, data: Any, slots: list[torch.Tensor]) -> Any:
        """The output a runner described: its tensors read from the arena's slots or, on CUDA,
        from the runner's memory. A tensor it could not deliver is an empty tensor on the
        ``meta`` device with the shape and dtype it reported (compare names the mismatch)."""

        def tensor(spec: dict[str, Any]) -> torch.Tensor:
            if spec.get("type") not in ("Tensor", "Parameter"):
                raise CandidateProblem(
                    f"{self.who} returned a {str(spec.get('type'))[:60]}, not a tensor"
                )
            if spec.get("device") != self.device:
                raise _Misplaced(str(spec.get("device"))[:20])
            if "ipc" in spec and self.imports is not None:
                return self.imports.tensor(spec).clone()
            index = spec.get("slot")
            if type(index) is int and 0 <= index < len(slots):
                return slots[index]
            return _meta(spec)

        try:
            return decode(data, tensor)
        except SharingError as exc:
            raise CandidateProblem(f"{self.who}'s output: {exc}") from None

    def close(self, *, arena: bool = False) -> None:
        """End the runner (and close the arena too, where this remote owns it)."""
        if self.imports is not None:
            self.imports.close()
        self.runner.end()
        if arena:
            self.arena.close()


def start_remote(runners: RunnerPool, arena: Arena, source: str, *, trusted: bool) -> Remote:
    """A runner with ``source`` loaded. A runner whose device broke inside its cage (a kernel
    whose Landlock version filters device ioctls, say) is ended, and the pool drops the layers
    that machine cannot hold, one at a time, before the program is given to another."""
    while True:
        remote = Remote(
            runners.take(), arena, runners.settings.device, who="Model" if trusted else "ModelNew"
        )
        try:
            remote.start(source, trusted=trusted)
            return remote
        except CageBroke as exc:
            remote.close()
            if not runners.drop_layer(exc.layers, str(exc)):
                raise CandidateProblem(
                    f"no runner could use the device in its cage: {exc}"
                ) from None
        except BaseException:
            remote.close()
            raise


class _Misplaced(Exception):
    """An output on another device than the judge's."""


def _meta(spec: dict[str, Any]) -> torch.Tensor:
    from codevolve.evaluator_workers.gpu.shared_tensors import DTYPES

    shape, dtype = spec.get("shape"), DTYPES.get(str(spec.get("dtype")))
    if not isinstance(shape, list) or dtype is None or not all(type(n) is int for n in shape):
        raise SharingError("an output description without a usable shape or dtype")
    return torch.empty(shape, dtype=dtype, device="meta")


def _rebuild(value: Any, staged: Any) -> Any:
    """``value`` with each tensor replaced by the next staged one."""
    if isinstance(value, torch.Tensor):
        return next(staged)
    if isinstance(value, list | tuple):
        items = [_rebuild(v, staged) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    return value


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
        self.remote.construct(seed, init)

    def _start(self, init: list[Any]) -> None:
        """The arena, sized for the timed batches (from the reference's time here), and the
        candidate's runner."""
        rng = judge_random(self.seed, KERNELBENCH, self.device, salt=self.salt)
        inputs = draw_inputs(self.reference, KERNELBENCH, self.seed, rng)
        started = self._clock()
        expected = self.reference_call("running Model", self.ref_model, copies(inputs))
        took_ms = max((self._clock() - started) * 1e3, 1e-3)
        one_set = byte_count(inputs) + (byte_count(expected) if self.device == "cpu" else 0)
        cap = ARENA_CAP[self.device]
        target = math.ceil(BATCH_TARGET_MS[self.device] / took_ms)
        self.batch = max(1, min(MAX_BATCH[self.device], target, cap // one_set))
        size = max(self.batch * one_set, byte_count(init) + one_set)
        self.arena = Arena.create(size, self.device)
        self.remote = start_remote(self.runners, self.arena, self.candidate, trusted=False)
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
        except _Misplaced as exc:
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
