"""The convolution pattern: a ``Conv1d`` or ``Conv2d`` module applied to one tensor.

``self.conv(x)`` where ``__init__`` builds ``conv`` as ``nn.Conv1d`` or ``nn.Conv2d``
(KernelBench Level-1 problems 50, 55, 56, 62, 63, 67, 76, 80, 87 among others). The template
(:mod:`codevolve.problems.kernelbench.conv_template`) computes it as a matrix product over
unfolded patches, reading the module's weight, bias and settings as forward runs.

Not recognised: transposed and 3-D convolutions, the functional forms (``F.conv2d``), a
convolution of a computed expression. Grouped and depthwise ones, string padding and padding
modes other than zeros are recognised and fall back to the module when forward runs.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from codevolve.problems.kernelbench.calls import module_applied

_MODULES = {"Conv1d": 1, "Conv2d": 2}


@dataclass(frozen=True, slots=True)
class Conv:
    tensor: str
    module: str  # the attribute holding the convolution module
    dims: int  # spatial dimensions: 1 or 2


def match_conv(expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]) -> Conv | None:
    applied = module_applied(expr, tensors, modules)
    dims = None if applied is None else _MODULES.get(applied[2])
    if applied is None or dims is None:
        return None
    return Conv(applied[0], applied[1], dims)
