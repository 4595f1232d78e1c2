"""Elementwise torch expressions translated into small trees that templates render.

A KernelBench forward is read with ``ast`` (never run). Its elementwise part becomes a
:data:`~codevolve.problems.kernelbench.tree.Node` tree of primitives: tensor elements, folded
constants and scalars that forward computes (``self.eps``, a module-level constant, a float
argument). :class:`Translator` builds the tree, :func:`elementwise` translates one expression and
:func:`template_operands` numbers its tensors the way a one-pass template loads them. Composite
torch functions (``F.gelu``, ``F.softplus``, ``F.selu``, ``torch.clamp``, ``F.leaky_relu``, ...)
are lowered to primitives by :mod:`codevolve.problems.kernelbench.lowerings`, once, with their
torch defaults, so a template renders only primitives and a test can evaluate any tree with numpy.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from codevolve.problems.kernelbench.calls import Call, bind, canonical_call, constant_value
from codevolve.problems.kernelbench.lowerings import (
    FLAGS,
    LOWERINGS,
    Lowering,
    NoTranslation,
    power,
)
from codevolve.problems.kernelbench.tree import Const, Input, Node, Param, op, renumber


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
    return tuple(tensors[s] for s in used), renumber(node, order), tuple(translator.params)


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
