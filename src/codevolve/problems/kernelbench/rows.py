"""Row patterns: one pass (or two) along a dimension, and statistics over trailing dimensions.

:class:`Rowwise` (the KernelBench Level-1 problems each covers in brackets): softmax and
log-softmax (23, 24); a reduction sum/mean/max/min of an elementwise map of one tensor, with or
without keepdim (47-49, 53; ``torch.max/min(x, dim)`` only through its values, ``[0]`` or
``.values``); and ``x / G`` or ``x * G`` where G is built from sums, means or 1-/2-norms of
elementwise maps of x over one ``dim`` with keepdim, under sqrt, rsqrt, abs and arithmetic
(36 RMSNorm, 38 L1, 39 L2).

:class:`TwoPass`: statistics over the trailing dimensions in per-chunk partials, then an
elementwise pass: a LayerNorm module (40, with or without affine) and the Frobenius norm (37).

Not recognised: argmax/argmin (51, 52), batch, instance and group norms (33-35), a reduction or
softmax with ``dtype=``, a factor whose statistics run along two dims, a LayerNorm called with
more than its input. :func:`dim_and_keepdim` and :func:`values_of` read reduction calls; the
pure-torch rewrites use them too.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from codevolve.problems.kernelbench.calls import (
    Call,
    bind,
    canonical_call,
    constant_value,
    module_applied,
)
from codevolve.problems.kernelbench.expressions import BINOPS, Translator, elementwise, mentions
from codevolve.problems.kernelbench.lowerings import NoTranslation, power
from codevolve.problems.kernelbench.tree import Count, Input, Node, Op, Stat, op


@dataclass(frozen=True, slots=True)
class Rowwise:
    """A pass along ``dim``: kind ``softmax``, ``log_softmax``, ``reduce`` or ``normalize``."""

    tensor: str
    dim: str  # Python source of the dimension
    kind: str
    params: tuple[str, ...] = ()
    reducer: str = ""  # reduce: sum, mean, max or min
    keepdim: bool = False  # reduce
    stats: tuple[Node, ...] = ()  # reduce: one map of x; normalize: the maps summed over the row
    scale: Node | None = None  # normalize: the row's factor, over Stat and Count leaves
    divide: bool = True  # normalize: x / scale (else x * scale)


@dataclass(frozen=True, slots=True)
class TwoPass:
    """``layernorm`` over the trailing dims of module ``module``, or the ``frobenius`` norm."""

    tensor: str
    kind: str
    module: str = ""  # layernorm: the attribute holding the nn.LayerNorm


def dim_and_keepdim(call: Call, names: Sequence[str]) -> tuple[str, bool] | None:
    """The ``dim`` (source) and ``keepdim`` (a literal) of a reduction call, if both are plain."""
    bound = bind(call, names, {"keepdim": False, "dtype": None})
    dim, keepdim = bound.get("dim"), bound.get("keepdim")
    if not isinstance(dim, ast.expr) or bound.get("dtype") is not None:
        return None
    if isinstance(dim, ast.Tuple | ast.List):  # several dimensions: not a row reduction
        return None
    if isinstance(keepdim, ast.Constant) and isinstance(keepdim.value, bool):
        return ast.unparse(dim), keepdim.value
    return (ast.unparse(dim), False) if keepdim is False else None


def match_softmax(
    expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]
) -> Rowwise | None:
    del modules
    call = canonical_call(expr)
    if call is None or call.name not in ("softmax", "log_softmax"):
        return None
    bound = bind(call, ("input", "dim"), {"dtype": None, "_stacklevel": None})
    x, dim = bound.get("input"), bound.get("dim")
    if not (isinstance(x, ast.Name) and x.id in tensors and isinstance(dim, ast.expr)):
        return None
    if bound.get("dtype") is not None:
        return None
    return Rowwise(x.id, ast.unparse(dim), call.name)


def values_of(expr: ast.expr) -> ast.expr | None:
    """``call`` of ``call[0]`` or ``call.values``: the values of a (values, indices) pair."""
    if isinstance(expr, ast.Subscript) and ast.unparse(expr.slice) == "0":
        return expr.value
    if isinstance(expr, ast.Attribute) and expr.attr == "values":
        return expr.value
    return None


_REDUCERS = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "max": "max", "min": "min"}


def match_reduce(expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]) -> Rowwise | None:
    del modules
    indexed = values_of(expr)
    if indexed is not None:
        expr = indexed
    call = canonical_call(expr)
    if call is None or call.name not in _REDUCERS:
        return None
    if (call.name in ("max", "min")) != (indexed is not None):
        return None  # torch.max(x, dim) is a (values, indices) pair; only its values are taken
    plain = dim_and_keepdim(call, ("input", "dim", "keepdim"))
    mapped = elementwise(call.args[0], tensors) if plain is not None and call.args else None
    if plain is None or mapped is None or len(mapped[1].used) != 1:
        return None
    node, translator = mapped
    slot = next(iter(translator.used))
    return Rowwise(
        tensors[slot],
        plain[0],
        "reduce",
        params=tuple(translator.params),
        reducer=_REDUCERS[call.name],
        keepdim=plain[1],
        stats=(_reslot(node, slot),),
    )


def match_normalize(
    expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]
) -> Rowwise | None:
    del modules
    if not (isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div | ast.Mult)):
        return None
    if not (isinstance(expr.left, ast.Name) and expr.left.id in tensors):
        return None
    reader = _RowReader(expr.left.id, tensors)
    try:
        scale = reader.node(expr.right)
    except NoTranslation:
        return None
    if scale is None or not reader.stats or reader.dim is None:
        return None
    return Rowwise(
        expr.left.id,
        reader.dim,
        "normalize",
        params=tuple(reader.translator.params),
        stats=tuple(reader.stats),
        scale=scale,
        divide=isinstance(expr.op, ast.Div),
    )


@dataclass
class _RowReader:
    """Reads a row factor: sums/means/norms of maps of ``x`` over one dim, with keepdim."""

    x: str
    tensors: Sequence[str]
    dim: str | None = None
    stats: list[Node] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.translator = Translator(self.tensors)

    def node(self, expr: ast.expr) -> Node | None:
        if not mentions(expr, self.tensors):
            return self.translator.scalar(expr)
        if isinstance(expr, ast.BinOp):
            left = self.node(expr.left)
            if isinstance(expr.op, ast.Pow):
                return None if left is None else power(left, constant_value(expr.right))
            right, name = self.node(expr.right), BINOPS.get(type(expr.op))
            return None if left is None or right is None or name is None else op(name, left, right)
        call = canonical_call(expr)
        if call is None:
            return None
        if call.name in ("sqrt", "rsqrt", "abs") and len(call.args) == 1 and not call.keywords:
            inner = self.node(call.args[0])
            return None if inner is None else op(call.name, inner)
        return self._statistic(call)

    def _statistic(self, call: Call) -> Node | None:
        if call.name in ("sum", "mean"):
            plain = dim_and_keepdim(call, ("input", "dim", "keepdim"))
            mapped = self._map(call.args[0]) if call.args else None
            if plain is None or not plain[1] or mapped is None or not self._same_dim(plain[0]):
                return None
            total = self._stat(mapped)
            return op("div", total, Count()) if call.name == "mean" else total
        if call.name in ("norm", "vector_norm"):
            order_name = "p" if call.name == "norm" else "ord"
            plain = dim_and_keepdim(call, ("input", order_name, "dim", "keepdim"))
            bound = bind(call, ("input", order_name, "dim", "keepdim"), {order_name: 2.0})
            order = constant_value(bound.get(order_name))
            x = bound.get("input")
            if (
                plain is None
                or not plain[1]
                or not self._same_dim(plain[0])
                or order not in (1.0, 2.0)
            ):
                return None
            if not (isinstance(x, ast.Name) and x.id == self.x):
                return None
            v = Input(0)
            if order == 1.0:
                return self._stat(op("abs", v))
            return op("sqrt", self._stat(op("mul", v, v)))
        return None

    def _map(self, expr: ast.expr) -> Node | None:
        node = self.translator.node(expr)
        only_x = self.translator.used <= {self.tensors.index(self.x)}
        self.translator.used.clear()
        return _reslot(node, self.tensors.index(self.x)) if node is not None and only_x else None

    def _stat(self, node: Node) -> Node:
        if node not in self.stats:
            self.stats.append(node)
        return Stat(self.stats.index(node))

    def _same_dim(self, dim: str) -> bool:
        if self.dim is None:
            self.dim = dim
        return self.dim == dim


def _reslot(node: Node, slot: int) -> Node:
    """``node`` with Input(slot) as Input(0): a row map reads the one tensor being normalised."""
    if isinstance(node, Input):
        return Input(0) if node.slot == slot else node
    if isinstance(node, Op):
        return Op(node.name, tuple(_reslot(a, slot) for a in node.args))
    return node


def match_two_pass(
    expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]
) -> TwoPass | None:
    applied = module_applied(expr, tensors, modules)
    if applied is not None and applied[2] == "LayerNorm":
        return TwoPass(applied[0], "layernorm", module=applied[1])
    if not (isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div)):
        return None
    if not (isinstance(expr.left, ast.Name) and expr.left.id in tensors):
        return None
    call = canonical_call(expr.right)
    if call is None or call.name not in ("norm", "vector_norm") or len(call.args) != 1:
        return None
    order = call.keywords.get("p", call.keywords.get("ord"))
    if set(call.keywords) - {"p", "ord"}:
        return None
    if order is not None and ast.unparse(order) not in ("'fro'", "2", "2.0"):
        return None
    x = call.args[0]
    if not (isinstance(x, ast.Name) and x.id == expr.left.id):
        return None
    return TwoPass(x.id, "frobenius")
