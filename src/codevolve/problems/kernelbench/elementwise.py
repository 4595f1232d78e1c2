"""The elementwise pattern: a chain of elementwise operations over one or two tensors.

KernelBench Level-1 problems 19-22 (ReLU, LeakyReLU, Sigmoid, Tanh), 25-32 (Swish, GELU, SELU,
HardSigmoid, Softplus, Softsign, ELU, HardTanh), 88 (MinGPTNewGelu) and 5 (matrix-scalar). The
expression becomes a :data:`Node` tree (:mod:`codevolve.problems.kernelbench.expressions` says
which torch functions lower to it); scalars forward computes (``self.alpha``, a float argument)
become parameters. Not recognised: three or more tensors, and any call with no lowering.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from codevolve.problems.kernelbench.expressions import elementwise, template_operands
from codevolve.problems.kernelbench.tree import Node


@dataclass(frozen=True, slots=True)
class Elementwise:
    tensors: tuple[str, ...]  # forward parameters loaded, slot order
    expr: Node
    params: tuple[str, ...]  # Python source of each Param slot, evaluated in forward


def match_elementwise(
    expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]
) -> Elementwise | None:
    del modules
    operands = template_operands(elementwise(expr, tensors), tensors)
    return None if operands is None else Elementwise(*operands)
