"""The values a Level-2 forward is read into, and the fused kernel a pending value becomes.

:mod:`codevolve.problems.kernelbench.chain` reads a forward statement by statement. Each name
it binds holds one of these values:

- :class:`Scalar`: a number (a folded :class:`~codevolve.problems.kernelbench.tree.Const`, or a
  :class:`~codevolve.problems.kernelbench.tree.Param` whose source forward evaluates);
- :class:`Tensor`: a tensor the new forward holds in a variable or reads from the module (a
  forward parameter, a library call's result, ``self.bias``): the kernels read it;
- :class:`Pending`: elementwise operations and reductions not computed yet, over one *main*
  tensor (the one a kernel walks) and other tensors broadcast onto it; it becomes a fused kernel
  (:class:`Kernel`) when something that is not fusable reads it, or when forward returns it;
- :class:`Opaque`: anything else (a shape, a tuple): kept in the statements that use it.

A pending value's shape is tracked against its main tensor's axes: ``reduced`` are the axes its
reductions ran over (size 1 now, or gone), ``present`` the main's axes its shape still has. All
reductions of one kernel run over one contiguous run of axes (``group``); a reduction over other
axes first turns the value into a kernel of its own. Operands are checked when forward runs: a
tensor that does not broadcast onto the value's shape (or would widen it) makes the new forward
fall back to the parent's.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from codevolve.problems.kernelbench.chain_modules import Attributes
from codevolve.problems.kernelbench.tree import Const, Input, Node, Op, Param, Stat


class NotFusable(Exception):
    """An expression the chain reader does not fuse: its statement is kept as written."""


@dataclass(frozen=True, slots=True)
class Scalar:
    node: Node  # over Const and Param leaves only
    source: str  # the value as Python source, for statements kept as written


@dataclass(frozen=True, slots=True)
class Tensor:
    source: str  # a local variable of the new forward, a forward parameter or ``self.<attr>...``
    rank: int | None = None  # its number of dimensions where the reader can tell (assumed)
    local: bool = False  # a variable of forward (a kernel may walk it), not a module attribute
    fresh: bool = False  # made by a call that returns a new tensor (a kernel may write into it)


@dataclass(frozen=True, slots=True)
class Opaque:
    source: str


@dataclass(frozen=True, slots=True)
class Pending:
    main: Tensor  # the tensor the kernel walks
    node: Node  # over Input slots, Params, Stats and Count
    reduced: tuple[int, ...] = ()  # main's axes reduced so far (sorted)
    present: tuple[int, ...] = ()  # main's axes the value's shape has, in order
    group: tuple[int, ...] = ()  # the axes its statistics run over (one group per kernel)
    ops: frozenset[int] = frozenset()  # ids of the eager operations it stands for
    torch: str = ""  # the value as one torch call on tensors, where it is one operation

    @property
    def full(self) -> bool:
        """The value has the main tensor's shape (nothing reduced)."""
        return not self.reduced


Value = Scalar | Tensor | Pending | Opaque


@dataclass(frozen=True, slots=True)
class Operand:
    """A tensor a kernel reads: at the main tensor's shape (``present`` None) or at a reduced
    shape (the main's axes ``present``, reduced ones of size 1)."""

    source: str
    present: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Reduction:
    kind: str  # "sum", "max", "min" or "lse" (log-sum-exp)
    value: Node  # reduced over the group, per row: over slots, Params and earlier Stats


@dataclass(frozen=True, slots=True)
class Kernel:
    """One fused kernel: what forward passes to it and what it computes."""

    main: str  # the tensor it walks (a variable of the new forward)
    rank: int | None  # main's number of dimensions, checked when forward runs (None: any)
    operands: tuple[Operand, ...]  # Input slots 1.. (slot 0 is main's element)
    params: tuple[str, ...]  # Param slots, Python sources evaluated in forward
    axes: tuple[int, ...]  # the reduced run of main's axes; () for an elementwise kernel
    reductions: tuple[Reduction, ...]  # Stat slots, in the order they are computed
    out: Node
    present: tuple[int, ...]  # main's axes in the output's shape (reduced ones of size 1)
    full: bool  # the output has main's shape
    ops: int  # eager operations it replaces
    in_place: bool = False  # writes its output into main (a temporary nothing else reads)


@dataclass
class Tables:
    """What pending values refer to by slot, shared by every kernel of one forward: the tensors
    loaded (``(source, present)`` pairs), scalar sources and statistics. A kernel renumbers the
    slots it uses (:func:`kernel_of`)."""

    slots: list[Operand] = field(default_factory=list)
    params: list[str] = field(default_factory=list)
    stats: list[tuple[Reduction, Tensor]] = field(default_factory=list)

    def slot(self, operand: Operand) -> Input:
        if operand not in self.slots:
            self.slots.append(operand)
        return Input(self.slots.index(operand))

    def param(self, source: str) -> Param:
        if source not in self.params:
            self.params.append(source)
        return Param(self.params.index(source))

    def stat(self, reduction: Reduction, main: Tensor) -> Stat:
        key = (reduction, main)
        if key not in self.stats:
            self.stats.append(key)
        return Stat(self.stats.index(key))


def leaves(node: Node) -> list[Node]:
    if isinstance(node, Op):
        return [leaf for arg in node.args for leaf in leaves(arg)]
    return [node]


def kernel_of(value: Pending, tables: Tables) -> Kernel:
    """The kernel computing ``value``: its slots, parameters and statistics renumbered."""
    stat_order: list[int] = []

    def visit(node: Node) -> None:
        for leaf in leaves(node):
            if isinstance(leaf, Stat) and leaf.index not in stat_order:
                visit(tables.stats[leaf.index][0].value)
                stat_order.append(leaf.index)

    visit(value.node)
    nodes = [value.node, *(tables.stats[i][0].value for i in stat_order)]
    used = [leaf for node in nodes for leaf in leaves(node)]
    main_slot = tables.slot(Operand(value.main.source))
    slots = [main_slot.slot]
    slots += sorted({n.slot for n in used if isinstance(n, Input)} - {main_slot.slot})
    params = sorted({n.slot for n in used if isinstance(n, Param)})
    slot_of = {s: i for i, s in enumerate(slots)}
    param_of = {s: i for i, s in enumerate(params)}
    stat_of = {s: i for i, s in enumerate(stat_order)}

    def renumber(node: Node) -> Node:
        return _renumbered(node, slot_of, param_of, stat_of)

    reductions = tuple(
        Reduction(tables.stats[i][0].kind, renumber(tables.stats[i][0].value)) for i in stat_order
    )
    return Kernel(
        main=value.main.source,
        rank=value.main.rank,
        operands=tuple(tables.slots[s] for s in slots[1:]),
        params=tuple(tables.params[p] for p in params),
        axes=value.group,
        reductions=reductions,
        out=renumber(value.node),
        present=value.present,
        full=value.full,
        ops=len(value.ops),
    )


def _renumbered(
    node: Node, slot_of: dict[int, int], param_of: dict[int, int], stat_of: dict[int, int]
) -> Node:
    """``node`` with its inputs, parameters and statistics renumbered by the three maps (a
    statistic not in ``stat_of`` keeps its index)."""
    if isinstance(node, Input):
        return Input(slot_of[node.slot])
    if isinstance(node, Param):
        return Param(param_of[node.slot])
    if isinstance(node, Stat):
        return Stat(stat_of.get(node.index, node.index))
    if isinstance(node, Op):
        return Op(node.name, tuple(_renumbered(a, slot_of, param_of, stat_of) for a in node.args))
    return node


def compact(kernel: Kernel) -> Kernel:
    """``kernel`` without the operands and parameters it no longer reads, slots renumbered."""
    nodes = [kernel.out, *(r.value for r in kernel.reductions)]
    used = [leaf for node in nodes for leaf in leaves(node)]
    slots = sorted({0} | {n.slot for n in used if isinstance(n, Input)})
    params = sorted({n.slot for n in used if isinstance(n, Param)})
    slot_of = {s: i for i, s in enumerate(slots)}
    param_of = {s: i for i, s in enumerate(params)}

    def renumber(node: Node) -> Node:
        return _renumbered(node, slot_of, param_of, {})

    return dataclasses.replace(
        kernel,
        operands=tuple(kernel.operands[s - 1] for s in slots[1:]),
        params=tuple(kernel.params[p] for p in params),
        reductions=tuple(Reduction(r.kind, renumber(r.value)) for r in kernel.reductions),
        out=renumber(kernel.out),
    )


def substitute(node: Node, target: Node, replacement: Node) -> Node:
    """``node`` with every ``target`` leaf replaced."""
    if node == target:
        return replacement
    if isinstance(node, Op):
        return Op(node.name, tuple(substitute(a, target, replacement) for a in node.args))
    return node


def simplify(node: Node) -> Node:
    """Exact simplifications: constant arithmetic folded, ``x + x`` as ``2 * x``, nested
    ``max``/``min`` with constants merged (two clamps in a row keep one bound each side)."""
    if not isinstance(node, Op):
        return node
    args = tuple(simplify(a) for a in node.args)
    if all(isinstance(a, Const) for a in args) and node.name in _FOLD:
        values = [a.value for a in args if isinstance(a, Const)]
        try:
            return Const(float(_FOLD[node.name](*values)))
        except (ZeroDivisionError, OverflowError):
            return Op(node.name, args)
    if node.name == "add" and args[0] == args[1]:
        return Op("mul", (Const(2.0), args[0]))
    if node.name in ("max", "min") and isinstance(args[1], Const):
        inner = args[0]
        if isinstance(inner, Op) and inner.name == node.name and isinstance(inner.args[1], Const):
            pick = max if node.name == "max" else min
            return Op(node.name, (inner.args[0], Const(pick(inner.args[1].value, args[1].value))))
    return Op(node.name, args)


_FOLD: dict[str, Callable[..., float]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": max,
    "min": min,
    "neg": lambda a: -a,
}


class Reading(Protocol):
    """What the readers of calls and reductions need of the chain reader
    (:class:`~codevolve.problems.kernelbench.chain.ChainReader`)."""

    attrs: Attributes
    tables: Tables
    guards: list[str]
    env: dict[str, Value]

    def attempt(self, read: Callable[[], Value]) -> Value | str: ...

    def combine(
        self, expr: ast.expr, values: list[Value], build: Callable[[list[Node]], Node]
    ) -> Value: ...

    def hoist(self, expr: ast.Call) -> Value: ...

    def value(self, expr: ast.expr) -> Value: ...

    def start(self, tensor: Tensor) -> Pending: ...

    def materialize(self, value: Pending) -> Tensor: ...

    def rename(self, node: ast.AST) -> tuple[str, frozenset[str]]: ...

    def op_id(self) -> int: ...
