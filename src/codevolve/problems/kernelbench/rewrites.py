"""Pure-torch rewrites of sub-expressions of a KernelBench forward, each equal to what it replaces.

- ``torch.diag(a) @ B`` (or ``A @ torch.diag(b)``) as a broadcast product when the argument is a
  vector (12);
- ``torch.max/min(x, dim)[0]`` (or ``.values``) as ``torch.amax/amin`` (49, 53);
- the cat/narrow exclusive cumsum as ``cumsum(x) - x`` (92);
- any multi-op elementwise chain of one tensor that equals a fused torch built-in (silu, GELU,
  mish, softplus, hardswish, ...: 25, 88), identified by evaluating both on points.

The returned expression is read with its assignments substituted only where each is read once
(substituting one read twice would compute it twice). Rewrites are searched from the top: a
rewritten node's children are not searched again. Not rewritten: a chain with scalar parameters,
of two tensors, or of one op (already a built-in).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from codevolve.core.pysource import parse_python
from codevolve.problems.kernelbench.calls import canonical_call
from codevolve.problems.kernelbench.expressions import elementwise
from codevolve.problems.kernelbench.forward import body_statements, returned_expression
from codevolve.problems.kernelbench.lowerings import SELU_ALPHA, SELU_SCALE, tanh_gelu
from codevolve.problems.kernelbench.matmul import product_operands
from codevolve.problems.kernelbench.rows import dim_and_keepdim, values_of
from codevolve.problems.kernelbench.scans import cumsum_args, exclusive_shift
from codevolve.problems.kernelbench.tree import Const, Input, evaluate, op, op_count


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Replace ``target`` (a node of the returned expression) by the expression ``source``."""

    name: str
    target: ast.expr
    source: str


@dataclass(frozen=True, slots=True)
class Builtin:
    """A fused torch function, its call template and its float64 values."""

    name: str  # canonical torch name (a call already of it is left alone)
    call: str  # ``{x}`` stands for the argument
    values: Callable[[np.ndarray], np.ndarray]


def _np_sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


def _np_softplus(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.logaddexp(0.0, x))


def _np_hardsigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.clip(x / 6.0 + 0.5, 0.0, 1.0))


def _np_elu(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))))


_TANH_GELU = tanh_gelu(Input(0))
_FUNCTIONAL = "torch.nn.functional"
BUILTINS = (
    Builtin("silu", f"{_FUNCTIONAL}.silu({{x}})", lambda x: x * _np_sigmoid(x)),
    Builtin(
        "gelu",
        f"{_FUNCTIONAL}.gelu({{x}}, approximate='tanh')",
        lambda x: evaluate(_TANH_GELU, [x]),
    ),
    Builtin(
        "gelu",
        f"{_FUNCTIONAL}.gelu({{x}})",
        lambda x: (
            evaluate(op("erf", op("mul", Input(0), Const(0.5**0.5))), [x]) * x * 0.5 + x * 0.5
        ),
    ),
    Builtin("mish", f"{_FUNCTIONAL}.mish({{x}})", lambda x: x * np.tanh(_np_softplus(x))),
    Builtin("softplus", f"{_FUNCTIONAL}.softplus({{x}})", _np_softplus),
    Builtin("hardswish", f"{_FUNCTIONAL}.hardswish({{x}})", lambda x: x * _np_hardsigmoid(x)),
    Builtin("hardsigmoid", f"{_FUNCTIONAL}.hardsigmoid({{x}})", _np_hardsigmoid),
    Builtin("sigmoid", "torch.sigmoid({x})", _np_sigmoid),
    Builtin("tanh", "torch.tanh({x})", np.tanh),
    Builtin("elu", f"{_FUNCTIONAL}.elu({{x}})", _np_elu),
    Builtin(
        "selu",
        "torch.selu({x})",
        lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(np.minimum(x, 0.0))),
    ),
    Builtin("relu", "torch.relu({x})", lambda x: np.maximum(x, 0.0)),
)
# Points where a chain and a built-in must agree (float64, relative 1e-7) to be taken as equal.
SAMPLES = np.concatenate([np.linspace(-8.0, 8.0, 161), [-1e-3, 1e-3, -0.3, 0.3, 12.0, -12.0]])


def rewrites(forward: ast.FunctionDef, tensors: Sequence[str]) -> tuple[ast.expr, list[Rewrite]]:
    """The returned expression (assignments substituted, each read once) and its rewrites."""
    expr = returned_expression(forward, single_use=True)
    if expr is None:
        return ast.Constant(None), []
    locals_ = [
        t.id
        for s in body_statements(forward)
        for t in ast.walk(s)
        if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
    ]
    names = [*tensors, *locals_]
    found: list[Rewrite] = []
    _collect(expr, names, found)
    return expr, found


def _collect(node: ast.expr, names: Sequence[str], found: list[Rewrite]) -> None:
    for rule in (_diag_product, _amax, _exclusive_cumsum, _builtin):
        rewrite = rule(node, names)
        if rewrite is not None:
            found.append(rewrite)
            return
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.expr):
            _collect(child, names, found)


def _paren(node: ast.expr) -> str:
    text = ast.unparse(node)
    return (
        text
        if isinstance(node, ast.Name | ast.Attribute | ast.Call | ast.Subscript)
        else f"({text})"
    )


def _diag_product(node: ast.expr, names: Sequence[str]) -> Rewrite | None:
    del names
    operands = product_operands(node)
    if operands is None:
        return None
    left, right = (canonical_call(o) for o in operands)
    if left is not None and left.name == "diag" and len(left.args) == 1 and not left.keywords:
        a, b = _paren(left.args[0]), _paren(operands[1])
        # diag of a vector is a matrix; of a matrix, a vector: keep the product for that case
        source = f"{a}.unsqueeze(1) * {b} if {a}.ndim == 1 else {ast.unparse(node)}"
        return Rewrite("diag_product", node, source)
    if right is not None and right.name == "diag" and len(right.args) == 1 and not right.keywords:
        a, b = _paren(operands[0]), _paren(right.args[0])
        source = f"{a} * {b}.unsqueeze(0) if {b}.ndim == 1 else {ast.unparse(node)}"
        return Rewrite("diag_product", node, source)
    return None


def _amax(node: ast.expr, names: Sequence[str]) -> Rewrite | None:
    del names
    pair = values_of(node)
    call = canonical_call(pair) if pair is not None else None
    if call is None or call.name not in ("max", "min") or not call.args:
        return None
    plain = dim_and_keepdim(call, ("input", "dim", "keepdim"))
    if plain is None:
        return None
    dim, keepdim = plain
    source = f"torch.a{call.name}({ast.unparse(call.args[0])}, dim={dim}, keepdim={keepdim})"
    return Rewrite(f"a{call.name}", node, source)


def _exclusive_cumsum(node: ast.expr, names: Sequence[str]) -> Rewrite | None:
    del names
    cumsum = cumsum_args(node)
    if cumsum is None:
        return None
    inner, dim = cumsum
    series = exclusive_shift(inner, ast.unparse(dim))
    if series is None:
        return None
    # cumsum of the series shifted by one (a leading zero) is the inclusive cumsum minus x
    x = _paren(series)
    return Rewrite("exclusive_cumsum", node, f"torch.cumsum({x}, dim={ast.unparse(dim)}) - {x}")


def _builtin(node: ast.expr, names: Sequence[str]) -> Rewrite | None:
    if isinstance(node, ast.Name | ast.Constant):
        return None
    mapped = elementwise(node, names)
    if mapped is None:
        return None
    tree, translator = mapped
    if translator.params or len(translator.used) != 1 or op_count(tree) < 2:
        return None
    x = names[next(iter(translator.used))]
    slot = names.index(x)
    values = evaluate(tree, [SAMPLES if i == slot else np.zeros(1) for i in range(len(names))])
    call = canonical_call(node)
    for builtin in BUILTINS:
        if call is not None and call.name == builtin.name:
            continue
        expected = builtin.values(SAMPLES)
        if values.shape == expected.shape and np.allclose(values, expected, rtol=1e-7, atol=1e-9):
            return Rewrite(builtin.name, node, builtin.call.format(x=x))
    return None


def replace(expr: ast.expr, target: ast.expr, source: str) -> str:
    """``expr`` with ``target`` (by identity) replaced by ``source``, as Python source."""
    replacement = parse_expression(source)

    class _Swap(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> ast.AST:
            return replacement if node is target else super().visit(node)

    swapped = _Swap().visit(expr)
    assert isinstance(swapped, ast.expr)
    return ast.unparse(swapped)


def parse_expression(source: str) -> ast.expr:
    tree = parse_python(source, "eval")
    return tree.body
