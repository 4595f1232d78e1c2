"""The pooling pattern: a max- or average-pooling module applied to one tensor.

``self.pool(x)`` where ``__init__`` builds ``pool`` as ``nn.MaxPool1d/2d/3d`` or
``nn.AvgPool1d/2d/3d`` (KernelBench Level-1 problems 41-46). The module's settings (kernel size,
stride, padding, dilation, ceil mode, indices, count_include_pad, divisor) are read from the
module when forward runs, so the template launches exactly the pooling the reference computes
and falls back to torch for the settings its kernel does not take.

Not recognised: the functional forms (``F.max_pool2d(x, ...)``), adaptive and fractional pooling,
LP pooling, a pooling module applied to a computed expression.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from codevolve.problems.kernelbench.calls import module_applied

_MODULES = {
    f"{kind}Pool{dims}d": (kind.lower(), dims) for kind in ("Max", "Avg") for dims in (1, 2, 3)
}


@dataclass(frozen=True, slots=True)
class Pool:
    tensor: str
    module: str  # the attribute holding the pooling module
    kind: str  # "max" or "avg"
    dims: int  # spatial dimensions: 1, 2 or 3


def match_pool(expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]) -> Pool | None:
    applied = module_applied(expr, tensors, modules)
    found = None if applied is None else _MODULES.get(applied[2])
    if applied is None or found is None:
        return None
    kind, dims = found
    return Pool(applied[0], applied[1], kind, dims)
