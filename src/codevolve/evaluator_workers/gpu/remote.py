"""The judge's handle on one program in one runner: starting it, asking it, staging values in
its arena and reading its outputs back from memory (trusted code of the judge).

A :class:`Remote` never believes what the runner says about values: tensors it names are read
from the arena's slots or, on CUDA, from the runner's own memory mapped by IPC handle, and every
description is bounds-checked before it is mapped (shared_tensors.py).

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from codevolve.evaluator_workers.errors import WorkerError
from codevolve.evaluator_workers.gpu.runner_link import Runner, RunnerGone, RunnerPool
from codevolve.evaluator_workers.gpu.shared_tensors import (
    DTYPES,
    Arena,
    CudaImports,
    SharingError,
    decode,
    encode,
    tensors_in,
)

REQUEST_TIMEOUT_S = 300.0  # one request to a runner: a first call may compile its kernels
POISON_BYTE = 0xFF  # every float dtype reads all-ones bytes as NaN; integers as -1


class CandidateProblem(WorkerError):
    """The candidate raised, or did something a correct kernel does not: ends the judging and is
    reported as the reply's ``problem``."""


class LoadFailed(Exception):
    """The candidate did not load (its load_error)."""


class CageBroke(Exception):
    """A runner's device stopped working inside its cage (before any program loaded)."""

    def __init__(self, why: str, layers: list[str]) -> None:
        super().__init__(why)
        self.layers = layers


class Remote:
    """One program in one runner, fed through one arena: the judge's handle on it."""

    def __init__(
        self,
        runner: Runner,
        arena: Arena,
        device: str,
        *,
        who: str,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.runner = runner
        self.timeout_s = timeout_s  # seconds one request may take
        self.arena = arena
        self.device = device
        self.who = who  # the program as problems name it ("ModelNew", "cuBLAS", ...)
        self.imports = CudaImports() if device == "cuda" else None
        self.layers: dict[str, bool] = {}
        self.cache: str | None = None  # the per-source folder the runner may write, if any

    def start(
        self,
        source: str,
        *,
        trusted: bool,
        role: str,
        compiles: bool = False,
        compiled: str | None = None,
    ) -> None:
        """Attach the arena (the runner enters its cage) and load ``source`` in ``role`` (the
        dotted name of a runner role's module: runner_role.py). The runner's Triton cache is
        the folder kept for ``source`` across judgings (Runner.kernel_cache); with ``compiled``
        (a compile runner's folder for this source) a copy of that folder's kernels in its own
        scratch (Runner.seed_kernels), which it alone writes; with ``compiles`` (a trusted
        program that ``torch.compile`` will compile) the pool's compile cache where it has one
        (compile_cache.py)."""
        if compiles and not trusted:
            raise ValueError("only a trusted program is given the compile cache")
        fds = [] if self.arena.fd is None else [self.arena.fd]
        lent = self.runner.compile_cache() if compiles else None
        if lent is not None:
            self.cache = lent
        elif compiled is None:
            self.cache = self.runner.kernel_cache(source)
        else:
            self.runner.seed_kernels(compiled)
        message = {
            "op": "attach",
            "arena": self.arena.handle.as_json(),
            "cache": self.cache,
            "compiled": lent is not None,
        }
        reply = self.ask(message, fds=fds)
        if "cage_broke_device" in reply:
            raise CageBroke(str(reply["cage_broke_device"]), [str(x) for x in reply["layers"]])
        layers = reply.get("layers", {})
        self.layers = (
            {str(k): bool(v) for k, v in layers.items()} if isinstance(layers, dict) else {}
        )
        reply = self.ask({"op": "load", "source": source, "trusted": trusted, "role": role})
        if "load_error" in reply:
            raise LoadFailed(str(reply["load_error"])[:2000])

    def ask(self, message: dict[str, Any], *, fds: Sequence[int] = ()) -> dict[str, Any]:
        """A request; a problem the program caused becomes :class:`CandidateProblem`."""
        try:
            reply = self.runner.request(message, timeout_s=self.timeout_s, fds=fds)
        except RunnerGone as exc:
            raise CandidateProblem(f"the {self.who} process failed: {exc}") from None
        if "problem" in reply:
            raise CandidateProblem(str(reply["problem"])[:2000])
        return reply

    def stage(self, values: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """Copy ``values`` into the arena: their descriptions, and the staged values. On CUDA
        it waits for the copies: the runner reads the arena from another CUDA context, which
        nothing orders after this process's stream (without the wait a runner asked at once
        reads the arena's previous values)."""
        staged: list[Any] = []

        def place(tensor: torch.Tensor) -> dict[str, Any]:
            slot, spec = self.arena.place(tensor)
            slot.copy_(tensor)
            staged.append(slot)
            return spec

        encoded = [encode(value, place) for value in values]
        if self.device == "cuda" and staged:
            torch.cuda.synchronize()
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
            poison(slot)
            specs.append(spec)
            tensors.append(slot)
        return specs, tensors

    def output(self, data: Any, slots: list[torch.Tensor]) -> Any:
        """The output a runner described: its tensors read from the arena's slots or, on CUDA,
        from the runner's memory. A tensor it could not deliver is an empty tensor on the
        ``meta`` device with the shape and dtype it reported (compare names the mismatch).
        The n-th tensor of the output is read from the n-th slot only: a description that names
        another slot (one written tensor claimed for two outputs) delivers nothing."""
        count = iter(range(1 << 30))

        def tensor(spec: dict[str, Any]) -> torch.Tensor:
            position = next(count)
            if spec.get("type") not in ("Tensor", "Parameter"):
                raise CandidateProblem(
                    f"{self.who} returned a {str(spec.get('type'))[:60]}, not a tensor"
                )
            if spec.get("device") != self.device:
                raise Misplaced(str(spec.get("device"))[:20])
            if "ipc" in spec and self.imports is not None:
                return self.imports.tensor(spec).clone()
            index = spec.get("slot")
            if type(index) is int and index == position and index < len(slots):
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


def start_remote(
    runners: RunnerPool,
    arena: Arena,
    source: str,
    *,
    trusted: bool,
    role: str,
    who: str,
    compiles: bool = False,
    compiled: str | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> Remote:
    """A runner with ``source`` loaded in ``role`` (runner_role.py), named ``who`` in problems;
    ``compiles`` and ``compiled``: Remote.start's; ``timeout_s``: what one request to it may take.
    A runner whose device broke inside its cage (a kernel whose Landlock version filters device
    ioctls, say) is ended, and the pool drops the layers that machine cannot hold, one at a
    time, before the program is given to another."""
    runners.preload(role)
    while True:
        remote = Remote(
            runners.take(), arena, runners.settings.device, who=who, timeout_s=timeout_s
        )
        try:
            remote.start(source, trusted=trusted, role=role, compiles=compiles, compiled=compiled)
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


class Misplaced(Exception):
    """An output on another device than the judge's."""


def _meta(spec: dict[str, Any]) -> torch.Tensor:
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


def poison(slot: torch.Tensor) -> None:
    """Fill an output slot with NaN bytes (0xFF), so an output never written reads as wrong."""
    if slot.numel():
        slot.reshape(-1).view(torch.uint8).fill_(POISON_BYTE)
