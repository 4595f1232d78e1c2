"""The KernelBench role of a runner: a ``Model`` (the user's reference, ``trusted``) or a
``ModelNew`` (the candidate) built and called on inputs the judge stages in the arena.

Runs inside the runner, after its cage is up (runner.py, runner_role.py): the program is loaded
through kb_loader.py (the candidate through its filter: source rules, a cut builtins table,
allowed imports). Requests:

- ``construct``: ``{"seed", "init"}``: the model built from the staged init inputs, under the
  judge's seed;
- ``compile`` (a trusted reference only: its ``torch.compile`` baseline): the model replaced by
  ``torch.compile`` of it and called once on the round's inputs, where it compiles; the reply
  counts Inductor's FX graph cache hits and misses;
- ``call``: a checked call of each round's inputs, with the aten operators it ran recorded;
- ``stage`` / ``go``: the rounds' inputs resolved ahead, then run as one timed batch.

Outputs go back as descriptions: on the CPU copied into the judge's slots, on CUDA kept and
named by IPC handle (shared_tensors.py). Imported only in runners and their zygote (needs torch).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from codevolve.evaluator_workers.gpu import shared_tensors
from codevolve.evaluator_workers.gpu.runner_role import Op, ProgramProblem, RoleContext
from codevolve.problems.kernelbench.device import kb_loader
from codevolve.problems.kernelbench.device.kb_loader import KbLoader
from codevolve.problems.kernelbench.device.kb_precision import fp32_in_fp32
from codevolve.problems.kernelbench.device.kb_watch import OpRecorder

ROLE = __name__  # what a judge names in its load requests
MESSAGE_CHARS = 300  # of a program's exception message


def warm() -> None:
    """In the zygote: the recorder's first use imports torch's dispatch machinery (seconds)."""
    with OpRecorder():
        torch.zeros(4).add_(1).sum()


def load(message: dict[str, Any], context: RoleContext) -> ModelRole | str:
    """The role for a ``load`` request, or why the program did not load."""
    fp32_in_fp32()  # before the program runs: no TF32 in this process (kb_precision.py)
    if not context.rules:  # tests: what the judge catches behind the rules
        kb_loader.check_model_new = lambda source: ""  # type: ignore[attr-defined]
    loader = KbLoader(Path(context.scratch) / "programs")
    trusted = bool(message.get("trusted"))
    source = str(message["source"])
    loaded: Any = loader.reference(source) if trusted else loader.candidate(source)
    program = getattr(loaded, "model" if trusted else "model_new", None)
    if program is None:
        return str(getattr(loaded, "message", "the program did not load"))
    return ModelRole(program, context, trusted=trusted)


class ModelRole:
    """One program's class, its model once built, and the rounds staged for it."""

    def __init__(self, program: Callable[..., Any], context: RoleContext, *, trusted: bool):
        self.program = program
        self.arena = context.arena
        self.device = context.device
        self.trusted = trusted
        self.model: Any = None
        self.kept: list[Any] = []  # outputs the judge has yet to copy (CUDA)
        self.staged: list[tuple[list[Any], list[dict[str, Any]]]] = []

    def ops(self) -> dict[str, Op]:
        ops: dict[str, Op] = {
            "construct": self.construct,
            "call": self.call,
            "stage": self.stage,
            "go": self.go,
        }
        if self.trusted:
            ops["compile"] = self.compile
        return ops

    def construct(self, message: dict[str, Any]) -> dict[str, Any]:
        init = [shared_tensors.decode(v, self.arena.tensor) for v in message["init"]]
        init = [v.clone() if isinstance(v, torch.Tensor) else v for v in init]
        torch.manual_seed(int(message["seed"]))
        model = self._call("constructing", self.program, init)
        if not isinstance(model, torch.nn.Module):
            raise ProgramProblem(f"{self._name()}(...) is not a torch.nn.Module")
        self.model = model.to(self.device)
        return {"ok": True}

    def compile(self, message: dict[str, Any]) -> dict[str, Any]:
        """The model replaced by ``torch.compile`` of it and called once on the staged round's
        inputs: that first call compiles (the judge times the request). Inductor's caches are
        the runner's: the worker's compile cache where the judge lent it (compile_cache.py)."""
        import torch._inductor.config as inductor_config
        from torch._dynamo.utils import counters

        # Kernels compile one after another in this process: a pool of helper processes would
        # need what the cage refuses (POSIX semaphores in /dev/shm).
        inductor_config.compile_threads = 1
        self.stage(message)
        before = dict(counters["inductor"])
        self.model = torch.compile(self.model)
        for args, _slots in self.staged[:1]:
            self._call("compiling", self.model, args)
        if self.device == "cuda":
            torch.cuda.synchronize()
        self.staged = []
        after = counters["inductor"]
        hits, misses = (
            after.get(key, 0) - before.get(key, 0)
            for key in ("fxgraph_cache_hit", "fxgraph_cache_miss")
        )
        return {"ok": True, "fx_graph_cache": {"hits": hits, "misses": misses}}

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        """A checked call: run the model on each round's inputs with the aten operators it
        runs recorded, and deliver the outputs."""
        self.stage(message)
        recorder = OpRecorder()
        reply = self.go({}, recorder=recorder)
        reply["ops"] = sorted(recorder.ops | recorder.overloads)
        return reply

    def stage(self, message: dict[str, Any]) -> dict[str, Any]:
        """Resolve the rounds' input descriptions now, so that a timed batch spends nothing on
        them."""
        self.staged = [
            (
                [shared_tensors.decode(v, self.arena.tensor) for v in r["inputs"]],
                r.get("slots", []),
            )
            for r in message["rounds"]
        ]
        return {"ok": True}

    def go(self, message: dict[str, Any], *, recorder: Any = None) -> dict[str, Any]:
        """Run the staged rounds, wait for the device, deliver: on the CPU each output copied
        into its slots, on CUDA kept and named by IPC handle."""
        del message
        self.kept = []
        if recorder is None:
            outputs = [self._call("", self.model, args) for args, _ in self.staged]
        else:
            with recorder:
                outputs = [self._call("", self.model, args) for args, _ in self.staged]
        if self.device == "cuda":
            torch.cuda.synchronize()
            if recorder is None:
                alike = self._alike(outputs)
                if alike is not None:
                    return {"alike": alike}
        results = [
            self._deliver(output, slots)
            for output, (_args, slots) in zip(outputs, self.staged, strict=True)
        ]
        reply: dict[str, Any] = {"outputs": results}
        if recorder is not None:
            reply["aliases"] = [
                self._alias(o, args) for o, (args, _) in zip(outputs, self.staged, strict=True)
            ]
        return reply

    def _alike(self, outputs: list[Any]) -> dict[str, Any] | None:
        """A timed batch's outputs in one short description when they are plain CUDA tensors of
        one shape, dtype and layout (the usual case): their facts once, then per output only
        which allocation holds it and where. Kept until the next batch. None otherwise."""
        if not outputs:
            return None
        first: Any = outputs[0]
        if type(first) is not torch.Tensor or first.device.type != "cuda":
            return None
        key = (first.dtype, first.shape, first.stride(), first.layout)
        if any(
            type(o) is not torch.Tensor
            or o.device.type != "cuda"
            or (o.dtype, o.shape, o.stride(), o.layout) != key
            for o in outputs
        ):
            return None
        if first.layout != torch.strided:
            return None
        self.kept = outputs
        handles: dict[str, int] = {}
        places = []
        for output in outputs:
            handle, offset = shared_tensors.locate_cuda(output)
            places.append([handles.setdefault(handle, len(handles)), offset])
        facts = {**shared_tensors.spec_of(first), "device": "cuda", "type": "Tensor"}
        return {"facts": facts, "handles": list(handles), "places": places}

    def _alias(self, output: Any, args: list[Any]) -> int:
        """The index of an input whose memory an output shares (-1: none)."""
        outs = {t.untyped_storage().data_ptr() for t in shared_tensors.tensors_in(output)}
        for index, arg in enumerate(args):
            if isinstance(arg, torch.Tensor) and arg.untyped_storage().data_ptr() in outs:
                return index
        return -1

    def _deliver(self, output: Any, slots: list[dict[str, Any]]) -> Any:
        count = iter(range(1 << 30))

        def place(tensor: Any) -> dict[str, Any]:
            index = next(count)
            facts = {
                **shared_tensors.spec_of(tensor),
                "device": tensor.device.type,
                "layout": str(tensor.layout),
                "type": type(tensor).__name__,
            }
            if tensor.device.type != self.device or tensor.layout != torch.strided:
                return {**facts, "slot": -1}
            if self.device == "cuda":
                self.kept.append(tensor)
                return {**facts, **shared_tensors.export_cuda(tensor)}
            if index >= len(slots):
                return {**facts, "slot": -1}
            slot = self.arena.tensor(slots[index])
            if slot.shape != tensor.shape or slot.dtype != tensor.dtype:
                return {**facts, "slot": -1}
            slot.copy_(tensor)
            return {**facts, "slot": index}

        try:
            return shared_tensors.encode(output, place)
        except shared_tensors.SharingError as exc:
            raise ProgramProblem(f"{self._name()} returned {exc}") from None

    def _name(self) -> str:
        return "Model" if self.trusted else "ModelNew"

    def _call(self, what: str, function: Callable[..., Any], args: Any) -> Any:
        try:
            return function(*args)
        except Exception as exc:  # noqa: BLE001 - the program's error is its result
            lines = str(exc).strip().splitlines() or [""]
            label = f"{what} {self._name()}" if what else self._name()
            text = f"{label} raised {type(exc).__name__}: {lines[0][:MESSAGE_CHARS]}"
            raise ProgramProblem(text) from None
