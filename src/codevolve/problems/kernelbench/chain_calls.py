"""Calls in a Level-2 chain: fused where the reader knows them, a library step otherwise.

:class:`Calls` reads one call of the forward for the chain reader
(:class:`~codevolve.problems.kernelbench.chain.ChainReader`): an identity (``clone``,
``detach``, ``contiguous``, a dropout built with ``p = 0``, ``nn.Identity``), an elementwise
function of :data:`~codevolve.problems.kernelbench.lowerings.LOWERINGS` (``torch.min(x,
other)``, ``torch.multiply`` and the like by their lowering's name), an activation module as its
functional form, a reduction (:mod:`codevolve.problems.kernelbench.chain_reduce`), a scalar or a
tensor of the module's that reads none of forward's tensors (``torch.tensor(c)``,
``self.subtract.view(1, -1, 1, 1, 1)``). Any other call, or one of these that does not read as
fusable, is a library step: the call as written, its result a new variable.
"""

from __future__ import annotations

import ast

from codevolve.problems.kernelbench.calls import Call, bind, canonical_call, constant_value, dotted
from codevolve.problems.kernelbench.chain_modules import activation_call, module_call
from codevolve.problems.kernelbench.chain_reduce import Reducer
from codevolve.problems.kernelbench.chain_values import (
    NotFusable,
    Pending,
    Reading,
    Scalar,
    Tensor,
    Value,
)
from codevolve.problems.kernelbench.lowerings import FLAGS, LOWERINGS
from codevolve.problems.kernelbench.tree import Const, Node

IDENTITIES = ("clone", "detach", "contiguous")
ALIASES = {"multiply": "mul", "subtract": "sub", "divide": "div", "true_divide": "div"}


class Calls:
    def __init__(self, reader: Reading, reducer: Reducer) -> None:
        self.reader = reader
        self.reducer = reducer

    def call(self, expr: ast.Call) -> Value:
        """A call: fused where the reader can, else a library step (the call as written)."""
        call = canonical_call(expr)
        found = module_call(expr, self.reader.attrs)
        outside = call is None or call.name == "tensor" or not self.reads_locals(expr)
        if found is None and outside:
            return self.outside(expr, call)
        value = self.reader.attempt(
            lambda: self.module(expr, *found) if found is not None else self.fused(expr, call)
        )
        return value if not isinstance(value, str) else self.reader.hoist(expr)

    def fused(self, expr: ast.Call, call: Call | None) -> Value:
        assert call is not None
        if call.name in IDENTITIES and len(call.args) == 1 and not call.keywords:
            return self.reader.value(call.args[0])
        if call.name in ("min", "max", "minimum", "maximum") and self.reducer.is_pair(call):
            return self.lowered(expr, call, "minimum" if "min" in call.name else "maximum")
        reduced = self.reducer.call(expr, call)
        if reduced is not None:
            return reduced
        name = ALIASES.get(call.name, call.name)
        if name in LOWERINGS:
            return self.lowered(expr, call, name)
        return self.reader.hoist(expr)

    def module(self, expr: ast.Call, attr: str, kind: str) -> Value:
        if kind == "Identity" and len(expr.args) == 1:
            return self.reader.value(expr.args[0])
        if (
            kind.startswith("Dropout")
            and len(expr.args) == 1
            and _zero_dropout(self.reader.attrs.modules[attr])
        ):
            return self.reader.value(expr.args[0])
        if kind == "AdaptiveAvgPool1d" or kind in ("AdaptiveAvgPool2d", "AdaptiveAvgPool3d"):
            pooled = self.reducer.adaptive(expr, attr, kind)
            if pooled is not None:
                return pooled
        functional = activation_call(expr, attr, self.reader.attrs)
        if functional is not None:
            inplace = next((k.value for k in functional.keywords if k.arg == "inplace"), None)
            if not (isinstance(inplace, ast.Constant) and inplace.value):
                return self.fused(functional, canonical_call(functional))
        raise NotFusable(f"self.{attr} ({kind})")

    def outside(self, expr: ast.Call, call: Call | None) -> Value:
        """A call reading none of the forward's tensors: a scalar, or a tensor of the module's
        (``self.subtract.view(1, -1, 1, 1, 1)``), evaluated in forward."""
        if call is not None and call.name == "tensor" and call.args:
            if set(call.keywords) - {"device"}:
                raise NotFusable("torch.tensor with a dtype")
            inner = self.reader.value(call.args[0])
            if isinstance(inner, Scalar):
                return inner
            raise NotFusable("torch.tensor of a tensor")
        if any(isinstance(v, Tensor) for v in self.names_in(expr)):
            return Tensor(self.reader.rename(expr)[0])
        if dotted(expr.func) in ("float", "int", "abs") or dotted(expr.func).startswith("math."):
            source = self.reader.rename(expr)[0]
            return Scalar(self.reader.tables.param(source), source)
        raise NotFusable(ast.unparse(expr.func))

    def lowered(self, expr: ast.Call, call: Call, name: str) -> Value:
        lower = LOWERINGS[name]
        bound = bind(call, lower.names, lower.defaults)
        if not bound:
            raise NotFusable(f"{call.name}'s arguments")
        flags: dict[str, object] = {}
        names: list[str] = []
        values: list[Value] = []
        for key, given in bound.items():
            if key in FLAGS:
                if given is not None and not isinstance(given, ast.Constant):
                    raise NotFusable(f"{call.name}'s {key}")
                if isinstance(given, ast.Constant):
                    flags[key] = given.value
                continue
            if given is None:
                continue
            names.append(key)
            values.append(
                self.reader.value(given) if isinstance(given, ast.expr) else _number(given, key)
            )
        if flags.get("inplace"):
            raise NotFusable("an in-place call")

        def build(nodes: list[Node]) -> Node:
            built = lower.build(dict(zip(names, nodes, strict=True)), flags)
            if built is None:
                raise NotFusable(f"{call.name} with these flags")
            return built

        return self.reader.combine(expr, values, build)

    def reads_locals(self, expr: ast.expr) -> bool:
        return any(isinstance(v, Tensor | Pending) and _local(v) for v in self.names_in(expr))

    def names_in(self, expr: ast.expr) -> list[Value]:
        found: list[Value] = []
        for node in ast.walk(expr):
            if isinstance(node, ast.Name) and node.id in self.reader.env:
                found.append(self.reader.env[node.id])
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and node.attr in self.reader.attrs.tensors
            ):
                found.append(Tensor(f"self.{node.attr}"))
        return found


def _local(value: Value) -> bool:
    return isinstance(value, Pending) or (isinstance(value, Tensor) and value.local)


def _number(value: object, name: str) -> Scalar:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NotFusable(f"argument {name}")
    return Scalar(Const(float(value)), repr(value))


def _zero_dropout(built: ast.Call) -> bool:
    given = (
        built.args[0]
        if built.args
        else next((k.value for k in built.keywords if k.arg == "p"), None)
    )
    return given is not None and constant_value(given) == 0.0
