"""Reading torch calls with ``ast``: dotted names, a module applied to a tensor, the canonical
call form, binding arguments to parameter names, and folding constant numeric expressions."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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


def module_applied(
    expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]
) -> tuple[str, str, str] | None:
    """``self.attr(x)`` for a forward parameter ``x`` and an attribute ``__init__`` builds by a
    call: (x, attr, the callee's name, e.g. ``Conv2d``); None for anything else."""
    if not (
        isinstance(expr, ast.Call)
        and len(expr.args) == 1
        and not expr.keywords
        and isinstance(expr.func, ast.Attribute)
        and dotted(expr.func.value) == "self"
        and expr.func.attr in modules
        and isinstance(x := expr.args[0], ast.Name)
        and x.id in tensors
    ):
        return None
    return x.id, expr.func.attr, modules[expr.func.attr]


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
