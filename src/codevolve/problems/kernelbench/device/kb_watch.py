"""What the judge checks around a KernelBench candidate's call, and the few facts a runner
records for it (trusted code of the judge, except :class:`OpRecorder`, which runs in the runner).

The candidate runs in a runner process of its own (runner.py), so nothing it does can change the
judge's torch, its switches, its threads or the reference model: those lived in one process
once and needed watching; now they are out of its reach. What is left to check here:

- its inputs: the staged copies in shared memory are compared with the judge's private copies
  after each checked call (a candidate that zeroes an input after computing is told so);
- the aten operators it ran, which the runner records with a TorchDispatchMode
  (:class:`OpRecorder`) and reports: a claim of the candidate's own process, so a filter with
  a clear message, never the boundary. A forbidden operator forbids its siblings too
  (:func:`forbidden_family`: ``aten.addmm`` and ``aten.bmm`` where ``aten.mm`` is forbidden).

Imported in the device process, in runners and in tests (needs torch).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Operators that compute the same thing as one another: forbidding one forbids them all.
FAMILIES = (
    frozenset(
        {
            "aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.addbmm", "aten.matmul",
            "aten.linear", "aten.mv", "aten.addmv", "aten.dot", "aten.vdot", "aten.einsum",
            "aten.tensordot", "aten._scaled_mm", "aten.addr", "aten.outer", "aten.ger",
            "aten.chain_matmul", "aten.linalg_multi_dot", "aten.inner",
        }
    ),
    frozenset(
        {
            "aten.convolution", "aten._convolution", "aten.conv1d", "aten.conv2d", "aten.conv3d",
            "aten.conv_transpose1d", "aten.conv_transpose2d", "aten.conv_transpose3d",
            "aten.cudnn_convolution", "aten.cudnn_convolution_transpose",
            "aten.mkldnn_convolution", "aten.convolution_overrideable", "aten._conv_depthwise2d",
            "aten.slow_conv2d", "aten.slow_conv3d", "aten.thnn_conv2d",
            "aten.slow_conv_transpose2d", "aten.slow_conv_transpose3d",
            "aten.slow_conv_dilated2d", "aten.slow_conv_dilated3d",
        }
    ),
)  # fmt: skip


def raise_if_context_broken(device: str) -> None:
    """Called when the judge's own code on ``device`` raised: if the CUDA context broke with
    it, raise that error. Such an error is sticky, so it must end the device process (a fault)
    rather than become a reported result. Errors that are not sticky pass."""
    if device == "cuda":
        torch.cuda.synchronize()


def copies(values: Sequence[Any]) -> list[Any]:
    """Copies of arguments: tensors cloned (strides kept), anything else deep-copied."""
    return [v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for v in values]


def same(a: Any, b: Any) -> bool:
    """Equal as the judge needs it: tensors by shape, dtype and bits (NaN equals NaN), lists
    and tuples element by element, anything else by ``==``."""
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(same, a, b))
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return type(a) is type(b) and bool(a == b)
    if (a.shape, a.dtype, a.device) != (b.shape, b.dtype, b.device):
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


def forbidden_family(names: Iterable[str]) -> frozenset[str]:
    """The forbidden operators with their siblings."""
    forbidden = set(names)
    for family in FAMILIES:
        if forbidden & family:
            forbidden |= family
    return frozenset(forbidden)


def forbidden_ran(ops: Iterable[str], names: Sequence[str]) -> str:
    """How a reported operator list breaks ``names`` (with siblings), or ""."""
    if not names:
        return ""
    family = forbidden_family(names)
    for op in sorted(ops):
        packet = op.rsplit(".", 1)[0] if op.count(".") >= 2 else op
        if op in family or packet in family:
            direct = op in names or packet in names
            kin = "" if direct else f" (a sibling of {', '.join(names)})"
            return f"ModelNew ran {packet}{kin}, which this problem forbids"
    return ""


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
