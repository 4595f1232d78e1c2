"""Reductions in a Level-2 chain: sums, means, max/min, logsumexp, softmax, pooling to one.

:class:`Reducer` turns a reduction call of the forward into a statistic of the pending value's
kernel (:class:`~codevolve.problems.kernelbench.chain_values.Reduction`), read by the value after
it. Dimensions are literals, module constants, or ``self.<attr>`` whose value is assumed from
the module's constants (the new forward checks it first). A reduction over dimensions the value
already reduced to size 1 is the identity; one over other dimensions than the kernel's group
first computes the value (a kernel of its own), then reduces that.
"""

from __future__ import annotations

import ast
import dataclasses

from codevolve.problems.kernelbench.calls import Call, bind, canonical_call, constant_value, dotted
from codevolve.problems.kernelbench.chain_values import (
    NotFusable,
    Pending,
    Reading,
    Reduction,
    Tensor,
    Value,
)
from codevolve.problems.kernelbench.rows import values_of
from codevolve.problems.kernelbench.tree import Const, Count, op

_KINDS = {"sum": "sum", "mean": "sum", "amax": "max", "amin": "min", "max": "max", "min": "min"}
_KINDS["logsumexp"] = "lse"


class Reducer:
    def __init__(self, reader: Reading) -> None:
        self.reader = reader

    # -- what a call is --------------------------------------------------------------------------

    def is_pair(self, call: Call) -> bool:
        """``torch.min(x, other)``: elementwise, not a reduction along a dimension."""
        if call.name in ("minimum", "maximum") or "other" in call.keywords:
            return True
        if "dim" in call.keywords or len(call.args) != 2:
            return False
        return self.dim(call.args[1]) is None

    def call(self, expr: ast.Call, call: Call) -> Value | None:
        """The value of a reduction call, or None when ``call`` is none."""
        name = call.name
        if name in ("max", "min"):
            raise NotFusable(f"torch.{name} along a dim gives values and indices")
        if name in _KINDS:
            names = ("input", "dim", "keepdim")
            bound = bind(call, names, {"dim": None, "keepdim": False, "dtype": None})
            if not bound or bound.get("dtype") is not None:
                raise NotFusable(f"{name}'s arguments")
            return self.reduce(expr, call.args[0], name, bound["dim"], _flag(bound["keepdim"]))
        if name in ("softmax", "log_softmax"):
            bound = bind(call, ("input", "dim"), {"dtype": None, "_stacklevel": None})
            if not bound or bound.get("dtype") is not None or bound.get("dim") is None:
                raise NotFusable(f"{name}'s arguments")
            return self.softmax(expr, call.args[0], bound["dim"], log=name == "log_softmax")
        if name == "squeeze" and len(call.args) == 2 and not call.keywords:
            return self.squeeze(call.args[0], call.args[1])
        if name.startswith("adaptive_avg_pool") and name[-2:] in ("1d", "2d", "3d"):
            bound = bind(call, ("input", "output_size"), {})
            if bound and _ones(bound["output_size"]):
                return self.pool_to_one(expr, call.args[0], int(name[-2]))
            raise NotFusable("an adaptive pool to more than one element")
        return None

    def indexed(self, expr: ast.Subscript | ast.Attribute) -> Value:
        """``torch.max(x, dim)[0]`` or ``.values``: the reduction's values."""
        inner = values_of(expr)
        call = canonical_call(inner) if inner is not None else None
        if call is None or call.name not in ("max", "min") or self.is_pair(call):
            raise NotFusable(ast.unparse(expr)[:40])
        bound = bind(call, ("input", "dim", "keepdim"), {"keepdim": False})
        if not bound or bound.get("dim") is None:
            raise NotFusable(f"{call.name}'s arguments")
        return self.reduce(expr, call.args[0], call.name, bound["dim"], _flag(bound["keepdim"]))

    def adaptive(self, expr: ast.Call, attr: str, kind: str) -> Value | None:
        """``self.pool(x)`` of an adaptive average pool to one element."""
        built = self.reader.attrs.modules[attr]
        size = built.args[0] if built.args else None
        size = next((k.value for k in built.keywords if k.arg == "output_size"), size)
        if len(expr.args) != 1 or not _ones(size):
            return None
        return self.pool_to_one(expr, expr.args[0], int(kind[-2]))

    def pool_to_one(self, expr: ast.Call, x: ast.expr, dims: int) -> Value:
        """An average over the last ``dims`` dimensions, kept."""
        axes = ast.Tuple([ast.Constant(-d) for d in range(dims, 0, -1)], ast.Load())
        return self.reduce(expr, x, "mean", axes, keepdim=True)

    # -- dimensions ------------------------------------------------------------------------------

    def dim(self, expr: object) -> int | None:
        """An integer dimension: a literal, a module constant, or an attribute whose value is
        assumed (and checked by the new forward first)."""
        if not isinstance(expr, ast.expr):
            return None
        value = constant_value(expr)
        if value is None and isinstance(expr, ast.Name):
            value = self.reader.attrs.constants.get(expr.id)
        if value is None and dotted(expr).startswith("self."):
            attr = dotted(expr)[len("self.") :]
            assumed = self.reader.attrs.assumed(attr)
            if assumed is not None:
                guard = f"self.{attr} == {assumed}"
                if guard not in self.reader.guards:
                    self.reader.guards.append(guard)
                return assumed
        if value is None or value != int(value):
            return None
        return int(value)

    def axes(self, given: object, value: Pending) -> tuple[int, ...]:
        """The main's axes a ``dim`` argument names (every one for None)."""
        rank = len(value.present)
        if value.main.rank is None:
            raise NotFusable("a reduction over a tensor of unknown rank")
        if given is None:
            return value.present
        items = given.elts if isinstance(given, ast.Tuple | ast.List) else [given]
        dims = [self.dim(item) for item in items]
        if any(d is None or not -rank <= d < rank for d in dims):
            raise NotFusable(f"dim {ast.unparse(given)}" if isinstance(given, ast.expr) else "dim")
        return tuple(sorted({value.present[d % rank] for d in dims if d is not None}))

    # -- reductions ------------------------------------------------------------------------------

    def pending(self, expr: ast.expr) -> Pending:
        value = self.reader.value(expr)
        if isinstance(value, Tensor) and value.local:
            return self.reader.start(value)
        if not isinstance(value, Pending):
            raise NotFusable("a reduction of no tensor of forward")
        return value

    def reduce(self, expr: ast.expr, x: ast.expr, name: str, dims: object, keepdim: bool) -> Value:
        return self._reduce(expr, self.pending(x), name, dims, keepdim)

    def _reduce(
        self, expr: ast.expr, value: Pending, name: str, dims: object, keepdim: bool
    ) -> Value:
        axes = self.axes(dims, value)
        live = tuple(a for a in axes if a not in value.reduced)
        present = value.present if keepdim else tuple(a for a in value.present if a not in axes)
        op_id = self.reader.op_id()
        if not live:  # over dimensions of size 1: the values as they are
            return dataclasses.replace(value, present=present, ops=value.ops | {op_id}, torch="")
        if live != tuple(range(live[0], live[-1] + 1)):
            raise NotFusable("a reduction over dimensions apart")
        if value.reduced or (value.group and live != value.group):
            # a reduction over other dimensions: the value is computed first, then reduced
            tensor = self.reader.materialize(value)
            return self._reduce(expr, self.reader.start(tensor), name, dims, keepdim)
        stat = self.reader.tables.stat(Reduction(_KINDS[name], value.node), value.main)
        node = op("div", stat, Count()) if name == "mean" else stat
        return Pending(
            main=value.main,
            node=node,
            reduced=live,
            present=present,
            group=live,
            ops=value.ops | {op_id},
            torch=self.reader.rename(expr)[0] if not value.ops else "",
        )

    def softmax(self, expr: ast.expr, x: ast.expr, dim: object, *, log: bool) -> Value:
        """Softmax (or log-softmax) along one dimension: ``exp(x - lse)`` with the row's
        log-sum-exp; over a dimension of size 1 it is ``x - x + 1`` (nan where x is not
        finite, as torch's)."""
        value = self.pending(x)
        (axis,) = self.axes(dim, value)
        op_id = self.reader.op_id()
        v = value.node
        if axis in value.reduced:
            node = op("sub", v, v) if log else op("add", op("sub", v, v), Const(1.0))
            return dataclasses.replace(value, node=node, ops=value.ops | {op_id}, torch="")
        if value.reduced or (value.group and value.group != (axis,)):
            value = self.reader.start(self.reader.materialize(value))
            v = value.node
        lse = self.reader.tables.stat(Reduction("lse", v), value.main)
        node = op("sub", v, lse) if log else op("exp", op("sub", v, lse))
        return Pending(
            main=value.main,
            node=node,
            present=value.present,
            group=(axis,),
            ops=value.ops | {op_id},
            torch=self.reader.rename(expr)[0] if not value.ops else "",
        )

    def squeeze(self, x: ast.expr, dim: ast.expr) -> Value:
        """Squeezing a dimension the value reduced to size 1 (a view: no operation)."""
        value = self.pending(x)
        (axis,) = self.axes(dim, value)
        if axis not in value.reduced or axis not in value.present:
            raise NotFusable("a squeeze of a dimension not known to be of size 1")
        present = tuple(a for a in value.present if a != axis)
        return dataclasses.replace(value, present=present, torch="")


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return value.value
    raise NotFusable("keepdim not a literal")


def _ones(size: object) -> bool:
    """An output size of one element: ``1`` or ``(1, 1)``."""
    if isinstance(size, ast.Tuple | ast.List):
        return bool(size.elts) and all(constant_value(e) == 1 for e in size.elts)
    return isinstance(size, ast.expr) and constant_value(size) == 1
