"""The elementwise expression tree: its nodes, its primitives (:data:`OPS`), a numpy evaluator.

A :data:`Node` is a tensor element (:class:`Input`), a folded constant (:class:`Const`), a scalar
that forward computes (:class:`Param`), a row statistic or length (:class:`Stat`, :class:`Count`)
or a primitive applied to nodes (:class:`Op`). Templates render each primitive; tests evaluate any
tree with :func:`evaluate`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Input:
    """The tensor input in slot ``slot``, one element of it."""

    slot: int


@dataclass(frozen=True, slots=True)
class Param:
    """A scalar computed in forward (``self.eps``, a module constant); its source is in slot."""

    slot: int


@dataclass(frozen=True, slots=True)
class Const:
    value: float


@dataclass(frozen=True, slots=True)
class Stat:
    """Row statistic ``index`` of a :class:`Rowwise` normalisation (a sum over the row)."""

    index: int


@dataclass(frozen=True, slots=True)
class Count:
    """The length of the row being reduced."""


@dataclass(frozen=True, slots=True)
class Op:
    """A primitive: arithmetic, comparison, ``where`` or a math function (see :data:`OPS`)."""

    name: str
    args: tuple[Node, ...]


Node = Input | Param | Const | Stat | Count | Op

# Primitive operations and their arity; templates render each, tests evaluate each.
OPS: dict[str, int] = {
    **dict.fromkeys(("add", "sub", "mul", "div", "max", "min", "gt", "ge", "lt", "le"), 2),
    **dict.fromkeys(("neg", "sigmoid", "tanh", "exp", "log", "abs", "sqrt", "rsqrt", "erf"), 1),
    **dict.fromkeys(("sin", "cos"), 1),
    "where": 3,
}


def op(name: str, *args: Node) -> Op:
    assert OPS[name] == len(args), name
    return Op(name, args)


def op_count(node: Node) -> int:
    return 1 + sum(op_count(a) for a in node.args) if isinstance(node, Op) else 0


def renumber(node: Node, order: dict[int, int]) -> Node:
    """``node`` with each Input(slot) as Input(order[slot])."""
    if isinstance(node, Input):
        return Input(order[node.slot])
    if isinstance(node, Op):
        return Op(node.name, tuple(renumber(a, order) for a in node.args))
    return node


def evaluate(node: Node, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """``node`` in float64 numpy (no parameters, no statistics): for identification and tests."""
    if isinstance(node, Input):
        return np.asarray(inputs[node.slot], dtype=np.float64)
    if isinstance(node, Const):
        return np.asarray(node.value, dtype=np.float64)
    if not isinstance(node, Op):
        raise ValueError(f"cannot evaluate {node!r} without its values")
    args = [evaluate(a, inputs) for a in node.args]
    with np.errstate(all="ignore"):
        return np.asarray(_NUMPY[node.name](*args), dtype=np.float64)


_erf = np.vectorize(math.erf, otypes=[np.float64])
_NUMPY: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "gt": np.greater,
    "ge": np.greater_equal,
    "lt": np.less,
    "le": np.less_equal,
    "neg": np.negative,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "abs": np.abs,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "erf": _erf,
    "sin": np.sin,
    "cos": np.cos,
    "where": np.where,
}
