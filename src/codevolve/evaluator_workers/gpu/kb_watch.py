"""What a KernelBench candidate's call must leave as it found it (trusted code of the judge).

The candidate runs in the judge's process, so beside its output the judge watches what it could
change to make a wrong output look right or a slow one look fast:

- its inputs, compared with copies taken before the call: a candidate that zeroes an input
  after computing would make a reference run on those inputs agree with anything;
- the reference model's parameters and buffers (snapshots around candidate calls only: a
  training-mode reference such as BatchNorm updates its running stats on its own calls);
- Python threads: one left alive after the call is work outside the timer, racing the checks;
- torch's namespaces and the process's switches (a replaced ``torch.cumsum``, TF32 turned on,
  another default dtype). These outlive the judging, so :class:`ProcessState` restores what it
  can and raises :class:`TamperedProcess`, which the device process answers by recycling itself;
  a thread left alive raises it too (no thread can be stopped from outside);
- freed memory: :func:`poison` fills blocks of the sizes in play with 0xFF bytes (NaN in every
  float dtype) and frees them, so the allocator hands NaN to a ``torch.empty`` that hoped for
  an earlier output;
- the aten operators it runs (:class:`OpRecorder`, a TorchDispatchMode), for forbidden ops.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import copy
import functools
import itertools
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from codevolve.evaluator_workers.errors import WorkerError

# Namespaces whose public entries a candidate must not replace (modules) and classes whose
# entries it must not replace or add (an added ``Tensor.cumsum`` shadows the C method).
WATCHED_MODULES = (
    "torch", "torch.nn", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special",
    "torch.cuda", "math", "builtins", "triton", "triton.language",
)  # fmt: skip
POISON_BYTE = 0xFF  # every float dtype reads all-ones bytes as NaN; integers as -1
POISON_LIMIT = 8 << 30  # bytes poisoned at most per call (inputs can be gigabytes)
LARGE_POISON = 64 << 20  # bytes: a CUDA block beside the sized ones, for odd sizes


class CandidateProblem(WorkerError):
    """The candidate raised, or did something a correct kernel does not: ends the judging and is
    reported as the reply's ``problem``."""


class TamperedProcess(WorkerError):
    """The candidate changed state that outlives the judging (torch's namespaces, global
    switches, a thread still running). Not a JobError: the device process recycles itself."""


def raise_if_context_broken(device: str) -> None:
    """Called when code running on ``device`` raised: if the CUDA context broke with it, raise
    that error. Such an error is sticky, so it must end the device process (a fault) rather than
    become a reported result; a synchronisation raises it again (an illegal address, a trap).
    Errors that are not sticky (out of memory, a Triton compile error, Python's) pass."""
    if device == "cuda":
        torch.cuda.synchronize()


def _watched_classes() -> tuple[type, ...]:
    return (torch.Tensor, torch.nn.Module)


def _is_private(key: str) -> bool:
    """Private entries change on their own (torch.cuda._initialized); dunders are watched."""
    return key.startswith("_") and not (key.startswith("__") and key.endswith("__"))


def _set_flag(owner: Any, name: str) -> Callable[[Any], None]:
    return lambda value: setattr(owner, name, value)


def _set_grad_mode(enabled: bool) -> None:
    torch.set_grad_enabled(enabled)  # called, not entered: sets the mode of this thread


def _switch_table() -> tuple[tuple[str, Callable[[], Any], Callable[[Any], None]], ...]:
    """The process-wide settings that change what (or how fast) the reference computes: name,
    getter, setter. The matmul precision comes before the TF32 flag it also sets."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    flags = (
        ("cuBLAS TF32", matmul, "allow_tf32"),
        ("cuBLAS fp16 reduction", matmul, "allow_fp16_reduced_precision_reduction"),
        ("cuBLAS bf16 reduction", matmul, "allow_bf16_reduced_precision_reduction"),
        ("cuDNN", cudnn, "enabled"),
        ("cuDNN TF32", cudnn, "allow_tf32"),
        ("cuDNN benchmark mode", cudnn, "benchmark"),
    )
    return (
        ("the default dtype", torch.get_default_dtype, torch.set_default_dtype),
        ("grad mode", torch.is_grad_enabled, _set_grad_mode),
        (
            "the float32 matmul precision",
            torch.get_float32_matmul_precision,
            torch.set_float32_matmul_precision,
        ),
        (
            "deterministic algorithms",
            torch.are_deterministic_algorithms_enabled,
            torch.use_deterministic_algorithms,
        ),
        ("the thread count", torch.get_num_threads, torch.set_num_threads),
        *(
            (label, functools.partial(getattr, owner, name), _set_flag(owner, name))
            for label, owner, name in flags
        ),
    )


def _switches() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some torch versions deprecate the TF32 flags
        return {name: get() for name, get, _ in _switch_table()}


def _restore_switches(saved: dict[str, Any]) -> list[str]:
    """Set back every switch that differs from ``saved``; their names."""
    changed = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, get, put in _switch_table():
            if get() != saved[name]:
                changed.append(name)
                put(saved[name])
    return changed


class ProcessState:
    """Torch's namespaces and switches as they were before the candidate loaded."""

    def __init__(self) -> None:
        _settle_torch()
        self._modules = {
            name: dict(vars(sys.modules[name])) for name in WATCHED_MODULES if name in sys.modules
        }
        self._classes = {cls: dict(vars(cls)) for cls in _watched_classes()}
        self._switches = _switches()
        self._threads = set(threading.enumerate())

    def check(self, when: str) -> None:
        """Raise :class:`TamperedProcess` if anything changed (after restoring what can be: the
        namespaces and switches; a thread cannot be stopped)."""
        switched = _restore_switches(self._switches)  # first: the default dtype sets Storage
        changed = self._restore_namespaces()
        threads = [t.name for t in threading.enumerate() if t not in self._threads]
        if switched:
            raise TamperedProcess(f"{when}: the candidate changed {switched[0]}")
        if changed:
            raise TamperedProcess(f"{when}: the candidate replaced {changed[0]}")
        if threads:
            raise TamperedProcess(f"{when}: the candidate left a thread running ({threads[0]})")

    def _restore_namespaces(self) -> list[str]:
        changed = []
        for name, saved in self._modules.items():
            live = vars(sys.modules[name])
            for key, value in saved.items():
                if not _is_private(key) and live.get(key, _MISSING) is not value:
                    changed.append(f"{name}.{key}")
                    setattr(sys.modules[name], key, value)
        for cls, saved_attrs in self._classes.items():
            live_attrs = dict(vars(cls))
            for key in set(saved_attrs) | set(live_attrs):
                if _is_private(key) or live_attrs.get(key, _MISSING) is saved_attrs.get(key):
                    continue
                changed.append(f"{cls.__name__}.{key}")
                if key in saved_attrs:
                    setattr(cls, key, saved_attrs[key])
                else:
                    delattr(cls, key)
        return changed


_MISSING = object()


@functools.cache
def _settle_torch() -> None:
    """Let torch finish its lazy imports before the first snapshot: a dispatch mode's first use
    imports torch._dynamo, which wraps ``torch.manual_seed`` (seconds, once per process). The
    judge's own first use must not look like a candidate's patch."""
    with OpRecorder():
        torch.zeros(1).add_(1)


def new_threads(before: set[threading.Thread]) -> list[str]:
    return [t.name for t in threading.enumerate() if t not in before]


def copies(values: Sequence[Any]) -> list[Any]:
    """Copies of arguments: tensors cloned (strides kept), anything else deep-copied."""
    return [v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for v in values]


def same(a: Any, b: Any) -> bool:
    """Equal as the judge needs it: tensors by shape, strides, dtype and bits (NaN equals NaN),
    lists and tuples element by element, anything else by ``==``."""
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return type(a) is type(b) and bool(a == b)
    if (a.shape, a.stride(), a.dtype, a.device) != (b.shape, b.stride(), b.dtype, b.device):
        return False
    if torch.equal(a, b):
        return True
    if not (a.is_floating_point() or a.is_complex()):
        return False
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def changed_input(values: Sequence[Any], saved: Sequence[Any]) -> int | None:
    return next(
        (i for i, (v, s) in enumerate(zip(values, saved, strict=True)) if not same(v, s)), None
    )


def state_of(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Copies of a model's parameters and buffers."""
    named = itertools.chain(model.named_parameters(), model.named_buffers())
    return [(name, tensor.detach().clone()) for name, tensor in named]


def changed_state(model: torch.nn.Module, saved: list[tuple[str, torch.Tensor]]) -> str:
    """The name of a parameter or buffer that differs from ``saved``, or ""."""
    named = itertools.chain(model.named_parameters(), model.named_buffers())
    live = {name: tensor.detach() for name, tensor in named}
    for name, tensor in saved:
        if name not in live or not same(live[name], tensor):
            return name
    return "" if len(live) == len(saved) else "a new parameter or buffer"


def poison(sizes: Iterable[int], device: str, *, release: bool = False) -> None:
    """Fill freed blocks of ``sizes`` bytes (and, on CUDA, one large block) with NaN bytes.

    ``release``: first return CUDA's cached blocks that nothing uses (it synchronises: checks
    only, never between timed events)."""
    if device == "cuda" and release:
        torch.cuda.empty_cache()
    blocks = []
    budget = POISON_LIMIT
    for size in sorted(set(sizes)):
        if 0 < size <= budget:
            blocks.append(torch.empty(size, dtype=torch.uint8, device=device).fill_(POISON_BYTE))
            budget -= size
    if device == "cuda":
        blocks.append(
            torch.empty(LARGE_POISON, dtype=torch.uint8, device=device).fill_(POISON_BYTE)
        )
    del blocks  # freed: the next allocations of these sizes get them back, NaN-filled


def byte_sizes(values: Iterable[Any]) -> set[int]:
    return {v.untyped_storage().nbytes() for v in values if isinstance(v, torch.Tensor)}


class OpRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records the aten operators run under it (``aten.mm``, and ``aten.mm.default``)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: set[str] = set()  # overload packets: aten.mm
        self.overloads: set[str] = set()  # aten.mm.default

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.ops.add(str(func.overloadpacket))
        self.overloads.add(str(func))
        return func(*args, **(kwargs or {}))

    def forbidden(self, names: Iterable[str]) -> str:
        """The first of ``names`` that ran, or ""."""
        return next((n for n in names if n in self.ops or n in self.overloads), "")
