"""Torch elementwise functions lowered to primitives, once, with torch's defaults.

:data:`LOWERINGS` maps a function name (``gelu``, ``softplus``, ``selu``, ``clamp``,
``leaky_relu``, ...) to its parameters, defaults and primitive form; :func:`power` lowers
``x ** c`` for the exponents a kernel computes exactly enough. A lowering that meets an argument
it cannot compute exactly raises :class:`NoTranslation`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from codevolve.problems.kernelbench.tree import Const, Node, op


class NoTranslation(Exception):
    """A lowering met an argument it cannot compute exactly (caught by
    :func:`~codevolve.problems.kernelbench.expressions.elementwise`)."""


# Keyword arguments that select a variant instead of carrying a value.
FLAGS = ("inplace", "approximate", "reduction", "size_average", "reduce")


def power(base: Node, exponent: float | None) -> Node | None:
    """``base ** exponent`` for the exponents a kernel computes exactly enough."""
    if exponent is None:
        return None
    if exponent == 0.5:
        return op("sqrt", base)
    if exponent == -0.5:
        return op("rsqrt", base)
    if exponent == -1.0:
        return op("div", Const(1.0), base)
    if exponent == float(int(exponent)) and 1 <= exponent <= 4:
        result = base
        for _ in range(int(exponent) - 1):
            result = op("mul", result, base)
        return result
    return None


Flags = dict[str, object]


@dataclass(frozen=True, slots=True)
class Lowering:
    """A torch function's parameters (positional order), defaults, and its primitive form."""

    names: tuple[str, ...]
    defaults: dict[str, object]
    build: Callable[[dict[str, Node], Flags], Node | None]


def _lowering(names: str, build: Callable[..., Node | None], **defaults: object) -> Lowering:
    """``build`` takes the arguments as keywords (flags excluded)."""
    return Lowering(tuple(names.split()), defaults, lambda n, f: build(**n))


def _unary(name: str) -> Lowering:
    return _lowering("input", lambda input: op(name, input))


def tanh_gelu(x: Node) -> Node:
    cube = op("mul", Const(0.044715), op("mul", op("mul", x, x), x))
    inner = op("mul", Const(math.sqrt(2.0 / math.pi)), op("add", x, cube))
    return op("mul", op("mul", Const(0.5), x), op("add", Const(1.0), op("tanh", inner)))


def _gelu(n: dict[str, Node], flags: Flags) -> Node | None:
    x = n["input"]
    approximate = flags.get("approximate", "none")
    if approximate == "tanh":
        return tanh_gelu(x)
    if approximate != "none":
        return None
    erf = op("erf", op("mul", x, Const(1.0 / math.sqrt(2.0))))
    return op("mul", op("mul", Const(0.5), x), op("add", Const(1.0), erf))


def softplus(x: Node, beta: Node, threshold: Node) -> Node:
    # max(bx, 0) + log(1 + exp(-|bx|)) is log(1 + exp(bx)) without overflow
    bx = op("mul", x, beta)
    tail = op("log", op("add", Const(1.0), op("exp", op("neg", op("abs", bx)))))
    stable = op("add", op("max", bx, Const(0.0)), tail)
    return op("where", op("gt", bx, threshold), x, op("div", stable, beta))


def _elu(x: Node, alpha: Node) -> Node:
    negative = op("mul", alpha, op("sub", op("exp", x), Const(1.0)))
    return op("where", op("gt", x, Const(0.0)), x, negative)


def _clamp(x: Node, low: Node | None = None, high: Node | None = None) -> Node:
    if low is not None:
        x = op("max", x, low)
    if high is not None:
        x = op("min", x, high)
    return x


def _hardsigmoid(x: Node) -> Node:
    return _clamp(op("add", op("div", x, Const(6.0)), Const(0.5)), Const(0.0), Const(1.0))


def _leaky_relu(input: Node, negative_slope: Node) -> Node:
    return op("where", op("ge", input, Const(0.0)), input, op("mul", input, negative_slope))


def _pow(input: Node, exponent: Node) -> Node:
    result = power(input, exponent.value if isinstance(exponent, Const) else None)
    if result is None:
        raise NoTranslation(f"exponent {exponent}")
    return result


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946

# torch elementwise functions in primitives, with torch's defaults
LOWERINGS: dict[str, Lowering] = {
    **{n: _unary(n) for n in ("sigmoid", "tanh", "exp", "log", "abs", "sqrt", "rsqrt", "erf")},
    **{n: _unary(n) for n in ("sin", "cos", "neg")},
    "relu": _lowering("input inplace", lambda input: op("max", input, Const(0.0)), inplace=None),
    "relu6": _lowering(
        "input inplace", lambda input: _clamp(input, Const(0.0), Const(6.0)), inplace=None
    ),
    "leaky_relu": _lowering(
        "input negative_slope inplace", _leaky_relu, negative_slope=0.01, inplace=None
    ),
    "clamp": _lowering(
        "input min max",
        lambda input, **b: _clamp(input, b.get("min"), b.get("max")),
        min=None,
        max=None,
    ),
    "clip": _lowering(
        "input min max",
        lambda input, **b: _clamp(input, b.get("min"), b.get("max")),
        min=None,
        max=None,
    ),
    "clamp_min": _lowering("input min", lambda input, min: _clamp(input, min)),
    "clamp_max": _lowering("input max", lambda input, max: _clamp(input, None, max)),
    "hardtanh": _lowering(
        "input min_val max_val inplace",
        lambda input, min_val, max_val: _clamp(input, min_val, max_val),
        min_val=-1.0,
        max_val=1.0,
        inplace=None,
    ),
    "hardsigmoid": _lowering("input inplace", lambda input: _hardsigmoid(input), inplace=None),
    "hardswish": _lowering(
        "input inplace", lambda input: op("mul", input, _hardsigmoid(input)), inplace=None
    ),
    "elu": _lowering(
        "input alpha inplace", lambda input, alpha: _elu(input, alpha), alpha=1.0, inplace=None
    ),
    "selu": _lowering(
        "input inplace",
        lambda input: op("mul", Const(SELU_SCALE), _elu(input, Const(SELU_ALPHA))),
        inplace=None,
    ),
    "softplus": _lowering(
        "input beta threshold",
        lambda input, beta, threshold: softplus(input, beta, threshold),
        beta=1.0,
        threshold=20.0,
    ),
    "softsign": _lowering(
        "input", lambda input: op("div", input, op("add", Const(1.0), op("abs", input)))
    ),
    "silu": _lowering(
        "input inplace", lambda input: op("mul", input, op("sigmoid", input)), inplace=None
    ),
    "mish": _lowering(
        "input inplace",
        lambda input: op("mul", input, op("tanh", softplus(input, Const(1.0), Const(20.0)))),
        inplace=None,
    ),
    "gelu": Lowering(("input", "approximate"), {"approximate": None}, _gelu),
    "square": _lowering("input", lambda input: op("mul", input, input)),
    "pow": _lowering("input exponent", _pow),
    "maximum": _lowering("input other", lambda input, other: op("max", input, other)),
    "minimum": _lowering("input other", lambda input, other: op("min", input, other)),
    **{
        n: _lowering("input other", lambda input, other, n=n: op(n, input, other))
        for n in ("add", "sub", "mul", "div")
    },
    "where": _lowering(
        "condition input other",
        lambda condition, input, other: op("where", condition, input, other),
    ),
}
