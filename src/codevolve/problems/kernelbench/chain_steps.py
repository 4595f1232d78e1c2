"""The steps of a Level-2 chain and how the new forward names what they compute.

A :class:`Chain` is the new forward's steps: :class:`Let`, a statement as written (a library
call, a torch call, anything the reader keeps), and :class:`Launch`, a fused kernel binding a
new variable. :class:`Renamer` writes a kept expression with the forward's names as the new
forward holds them (computing pending values first, reading a sub-expression already computed
by a step of its own from its variable). :func:`transposed_product` reads ``torch.matmul(a,
self.w.T)``: a product whose weight a rewrite can use.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from codevolve.problems.kernelbench.calls import canonical_call, dotted
from codevolve.problems.kernelbench.chain_values import (
    Kernel,
    Opaque,
    Pending,
    Reading,
    Scalar,
    Tensor,
)
from codevolve.problems.kernelbench.forward import Forward


@dataclass(frozen=True, slots=True)
class Let:
    """A statement of the new forward as written (names renamed)."""

    text: str
    target: str  # the variable it binds, "" for any other statement
    reads: frozenset[str]  # the forward's tensor variables it reads
    module: str = ""  # ``target = self.<module>(<arg>)``: the module attribute
    kind: str = ""  # and its class (``Conv2d``, ``Linear``)
    arg: str = ""  # and its one argument
    fresh: bool = False  # it binds a new tensor, never a view of another
    weight: str = ""  # a product ``arg @ weight.T`` (a Linear's or a matmul's): the weight
    checked: bool = False  # it binds None for inputs it does not take: forward falls back


@dataclass(frozen=True, slots=True)
class Launch:
    target: str
    kernel: Kernel


Step = Let | Launch


@dataclass(frozen=True, slots=True)
class Chain:
    forward: Forward
    steps: tuple[Step, ...]
    result: str  # the returned expression
    guards: tuple[str, ...]  # conditions the new forward checks first (assumed attribute values)
    notes: tuple[str, ...]  # what was kept as written, and why

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        return tuple(s.kernel for s in self.steps if isinstance(s, Launch))


class Renamer(ast.NodeTransformer):
    """The forward's names as the new forward holds them; pending values computed first;
    sub-expressions already computed by a step of their own (``hoisted``, by node id) read
    from its variable."""

    def __init__(self, reader: Reading, reads: set[str], hoisted: dict[int, str]) -> None:
        self.reader = reader
        self.reads = reads
        self.hoisted = hoisted

    def visit(self, node: ast.AST) -> ast.AST:
        name = self.hoisted.get(id(node))
        if name is not None:
            self.reads.add(name)
            return ast.Name(name, ast.Load())
        visited: ast.AST = super().visit(node)
        return visited

    def visit_Name(self, node: ast.Name) -> ast.expr:
        value = self.reader.env.get(node.id)
        if isinstance(node.ctx, ast.Store) or value is None:
            return node
        if isinstance(value, Pending):
            value = self.reader.materialize(value)
        if isinstance(value, Tensor):
            if value.local:
                self.reads.add(value.source)
            return ast.parse(value.source, mode="eval").body
        if isinstance(value, Scalar | Opaque) and value.source and value.source != node.id:
            return ast.parse(value.source, mode="eval").body  # held elsewhere in the new forward
        return node


def transposed_product(call: ast.expr) -> tuple[str, str] | None:
    """``torch.matmul(a, self.w.T)`` (or ``mm``, ``.t()``): (a, "self.w")."""
    found = canonical_call(call)
    if found is None or found.name not in ("matmul", "mm") or len(found.args) != 2:
        return None
    a, b = found.args
    inner = b.value if isinstance(b, ast.Attribute) and b.attr == "T" else None
    bound = canonical_call(b)
    if bound is not None and bound.name == "t" and len(bound.args) == 1 and not bound.keywords:
        inner = bound.args[0]
    if inner is None or not dotted(inner).startswith("self.") or dotted(inner).count(".") != 1:
        return None
    return ast.unparse(a), dotted(inner)
