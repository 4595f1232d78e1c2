"""Elementwise torch expressions as small trees that templates render and tests evaluate.

A KernelBench forward is read with ``ast`` (never run). Its elementwise part becomes a
:data:`Node` tree of primitives (:data:`OPS`): tensor elements (:class:`Input`), folded constants
(:class:`Const`) and scalars that forward computes (:class:`Param`: ``self.eps``, a module-level
constant, a float argument). Composite torch functions (``F.gelu``, ``F.softplus``, ``F.selu``,
``torch.clamp``, ``F.leaky_relu``, ...) are lowered to primitives here, once, with their torch
defaults, so a template renders only primitives and a test can evaluate any tree with numpy.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

# --- the elementwise expression tree -------------------------------------------------------------


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


def _renumber(node: Node, order: dict[int, int]) -> Node:
    """``node`` with each Input(slot) as Input(order[slot])."""
    if isinstance(node, Input):
        return Input(order[node.slot])
    if isinstance(node, Op):
        return Op(node.name, tuple(_renumber(a, order) for a in node.args))
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

# --- reading calls -------------------------------------------------------------------------------

# Module prefixes of torch functions: ``F.relu``, ``torch.relu`` and ``torch.nn.functional.relu``
# are one function. Any other dotted name (``math.sqrt``, ``self.ln``) is no tensor method.
_PREFIXES = (
    "torch.nn.functional.",
    "nn.functional.",
    "F.",
    "torch.special.",
    "torch.linalg.",
    "torch.",
)
_NOT_RECEIVERS = ("torch", "F", "nn", "math", "self", "triton", "tl")


def dotted(node: ast.expr) -> str:
    """``torch.nn.functional.relu`` for that attribute chain; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


@dataclass(frozen=True, slots=True)
class Call:
    """A call in canonical form: ``torch.sigmoid(x)``, ``F.sigmoid(x)``, ``x.sigmoid()`` alike
    (a method's receiver is its first argument)."""

    name: str
    args: tuple[ast.expr, ...]
    keywords: dict[str, ast.expr]


def canonical_call(node: ast.expr) -> Call | None:
    if not isinstance(node, ast.Call) or any(k.arg is None for k in node.keywords):
        return None
    keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
    name = dotted(node.func)
    for prefix in _PREFIXES:
        if name.startswith(prefix) and "." not in name[len(prefix) :]:
            return Call(name[len(prefix) :], tuple(node.args), keywords)
    if isinstance(node.func, ast.Attribute) and name.split(".")[0] not in _NOT_RECEIVERS:
        return Call(node.func.attr, (node.func.value, *node.args), keywords)
    return None


def bind(call: Call, names: Sequence[str], defaults: dict[str, object]) -> dict[str, object]:
    """Arguments by parameter name (positional first), defaults filled; ``{}`` on a mismatch."""
    if len(call.args) > len(names) or any(k not in names for k in call.keywords):
        return {}
    bound: dict[str, object] = dict(defaults)
    bound.update(zip(names, call.args, strict=False))
    bound.update(call.keywords)
    return bound if all(n in bound for n in names) else {}


def constant_value(node: object) -> float | None:
    """The value of a constant numeric expression (literals, arithmetic, ``math`` constants and
    functions), or None."""
    if isinstance(node, bool):
        return None
    if isinstance(node, int | float):
        return float(node)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return None if isinstance(node.value, bool) else float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = constant_value(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp):
        left, right = constant_value(node.left), constant_value(node.right)
        fold = _FOLD.get(type(node.op))
        if left is None or right is None or fold is None:
            return None
        try:
            return float(fold(left, right))
        except (ZeroDivisionError, OverflowError, ValueError):
            return None
    if isinstance(node, ast.Attribute) and dotted(node) in ("math.pi", "math.e"):
        return math.pi if node.attr == "pi" else math.e
    if isinstance(node, ast.Call) and dotted(node.func) in _MATH and len(node.args) == 1:
        inner = constant_value(node.args[0])
        try:
            return None if inner is None else float(_MATH[dotted(node.func)](inner))
        except (ValueError, OverflowError):
            return None
    return None


_FOLD: dict[type, Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a**b,
}
_MATH: dict[str, Callable[[float], float]] = {
    "math.sqrt": math.sqrt,
    "math.exp": math.exp,
    "math.log": math.log,
    "float": float,
    "int": float,
}


# --- elementwise translation ---------------------------------------------------------------------


class NoTranslation(Exception):
    """A lowering met an argument it cannot compute exactly (caught by :func:`elementwise`)."""


@dataclass
class Translator:
    """Turns elementwise torch expressions over ``tensors`` into :data:`Node` trees.

    A sub-expression naming no tensor is a scalar: a folded :class:`Const` or a :class:`Param`
    whose source forward evaluates. ``params`` grows as scalars are met, ``used`` as inputs are.
    Raises :class:`NoTranslation` from inside lowerings.
    """

    tensors: Sequence[str]
    params: list[str] = field(default_factory=list)
    used: set[int] = field(default_factory=set)

    def node(self, expr: object) -> Node | None:
        if isinstance(expr, int | float) and not isinstance(expr, bool):
            return Const(float(expr))
        if not isinstance(expr, ast.expr):
            return None
        if isinstance(expr, ast.Name) and expr.id in self.tensors:
            self.used.add(self.tensors.index(expr.id))
            return Input(self.tensors.index(expr.id))
        if not mentions(expr, self.tensors):
            return self.scalar(expr)
        if isinstance(expr, ast.BinOp):
            return self._binop(expr)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            inner = self.node(expr.operand)
            return None if inner is None else op("neg", inner)
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
            name = COMPARISONS.get(type(expr.ops[0]))
            left, right = self.node(expr.left), self.node(expr.comparators[0])
            if name is None or left is None or right is None:
                return None
            return op(name, left, right)
        call = canonical_call(expr)
        return None if call is None else self.call(call, LOWERINGS)

    def scalar(self, expr: ast.expr) -> Node | None:
        value = constant_value(expr)
        if value is not None:
            return Const(value)
        if any(isinstance(n, ast.Call | ast.Attribute | ast.Name) for n in ast.walk(expr)):
            source = ast.unparse(expr)
            if source not in self.params:
                self.params.append(source)
            return Param(self.params.index(source))
        return None

    def _binop(self, expr: ast.BinOp) -> Node | None:
        left = self.node(expr.left)
        if isinstance(expr.op, ast.Pow):
            return None if left is None else power(left, constant_value(expr.right))
        right = self.node(expr.right)
        name = BINOPS.get(type(expr.op))
        if left is None or right is None or name is None:
            return None
        return op(name, left, right)

    def call(self, call: Call, lowerings: dict[str, Lowering]) -> Node | None:
        """``call`` lowered by its entry in ``lowerings``; None when it has none or an argument
        is not elementwise. Keyword-only flags (``inplace``, ``approximate``, ``reduction``) are
        the lowering's to read from :data:`FLAGS` keys; an ``inplace=True`` call is refused."""
        lower = lowerings.get(call.name)
        if lower is None:
            return None
        bound = bind(call, lower.names, lower.defaults)
        if not bound or _truthy(bound.get("inplace")):
            return None
        nodes: dict[str, Node] = {}
        for name, value in bound.items():
            if name in FLAGS:
                if value is not None and not isinstance(value, ast.Constant | str):
                    return None
                continue
            if value is None:
                continue
            node = self.node(value)
            if node is None:
                return None
            nodes[name] = node
        flags = {
            name: value.value if isinstance(value, ast.Constant) else value
            for name, value in bound.items()
            if name in FLAGS and value is not None
        }
        return lower.build(nodes, flags)


def mentions(expr: ast.expr, names: Sequence[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(expr))


def _truthy(value: object) -> bool:
    return isinstance(value, ast.Constant) and bool(value.value)


BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
COMPARISONS = {ast.Gt: "gt", ast.GtE: "ge", ast.Lt: "lt", ast.LtE: "le"}
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


# --- lowerings of torch functions ---------------------------------------------------------------

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


def template_operands(
    mapped: tuple[Node, Translator] | None, tensors: Sequence[str]
) -> tuple[tuple[str, ...], Node, tuple[str, ...]] | None:
    """What a one-pass template loads for :func:`elementwise`'s translation over ``tensors``:
    the tensors it reads, in slot order, its tree with their slots numbered from 0 in that order
    (the order the template loads them), and its parameters' sources. None for no translation or
    past two tensors (a one-pass template loads no more)."""
    if mapped is None:
        return None
    node, translator = mapped
    used = sorted(translator.used)
    if len(used) > 2:
        return None
    order = {slot: i for i, slot in enumerate(used)}
    return tuple(tensors[s] for s in used), _renumber(node, order), tuple(translator.params)


def elementwise(expr: ast.expr, tensors: Sequence[str]) -> tuple[Node, Translator] | None:
    """``expr`` as a tree over ``tensors``, when it is elementwise and names at least one."""
    translator = Translator(tensors)
    try:
        node = translator.node(expr)
    except NoTranslation:
        return None
    if node is None or not translator.used:
        return None
    return node, translator
