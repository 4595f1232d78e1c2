"""The convolution pattern: a convolution module applied to one tensor.

``self.conv(x)`` where ``__init__`` builds ``conv`` as ``nn.Conv1d``, ``nn.Conv2d``,
``nn.Conv3d`` or one of their ``ConvTranspose`` forms (KernelBench Level-1 problems 50 and
54-87 but 86, a depthwise module then a pointwise one). The templates read the module's weight,
bias and settings as forward runs; which templates are proposed depends on the form
(:func:`codevolve.problems.kernelbench.templates.templates_for`): Triton kernels and a product
over unfolded patches for 1-D and 2-D convolutions, cuDNN's settings (algorithm search,
channels-last layout) for every form.

``groups`` is read from the constructor call as written: absent or the literal 1 (``"one"``),
the call's own first argument, its input channels (``"depthwise"``), or anything else
(``"any"``, ``groups=groups`` as KernelBench writes it: the value comes from
``get_init_inputs``). It only picks which templates are proposed; each template checks the
module's real ``groups`` when forward runs and falls back to the module where its kernel does
not apply.

Not recognised: the functional forms (``F.conv2d``), a convolution of a computed expression,
two convolutions in a row (problem 86).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, replace

from codevolve.problems.kernelbench.calls import module_applied

_MODULES = {
    f"Conv{transposed}{dims}d": (dims, bool(transposed))
    for dims in (1, 2, 3)
    for transposed in ("", "Transpose")
}
_GROUPS_POSITION = 6  # groups is the seventh argument of every Conv and ConvTranspose module
GROUPS_HINTS = ("one", "depthwise", "any")


@dataclass(frozen=True, slots=True)
class Conv:
    tensor: str
    module: str  # the attribute holding the convolution module
    dims: int  # spatial dimensions: 1, 2 or 3
    transposed: bool = False
    groups: str = "any"  # as the constructor call writes it: one of GROUPS_HINTS


def match_conv(expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]) -> Conv | None:
    applied = module_applied(expr, tensors, modules)
    found = None if applied is None else _MODULES.get(applied[2])
    if applied is None or found is None:
        return None
    return Conv(applied[0], applied[1], *found)


def with_groups(conv: Conv, call: ast.Call) -> Conv:
    """``conv`` with its groups as ``call`` (the module's constructor call) writes them."""
    written = next((k.value for k in call.keywords if k.arg == "groups"), None)
    if written is None and len(call.args) > _GROUPS_POSITION:
        written = call.args[_GROUPS_POSITION]
    channels = next((k.value for k in call.keywords if k.arg == "in_channels"), None)
    if channels is None and call.args:
        channels = call.args[0]
    if written is None or (isinstance(written, ast.Constant) and written.value == 1):
        return replace(conv, groups="one")
    if channels is not None and ast.dump(written) == ast.dump(channels):
        return replace(conv, groups="depthwise")
    return replace(conv, groups="any")
