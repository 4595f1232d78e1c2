"""Reading a Level-2 forward as a chain: library calls kept, elementwise tails fused.

KernelBench's Level-2 problems run a heavy operator (``nn.Linear``, a matmul, a convolution or
transposed convolution) and then a tail of cheap operations: activations, arithmetic with
scalars and broadcast parameters, reductions along dimensions, softmax, residual additions. A
kernel engineer keeps the library call for the heavy operator and computes the tail in one
kernel. :func:`read_chain` reads ``ModelNew.forward`` (with ``ast``, never run) statement by
statement into the steps of such a forward (:class:`~codevolve.problems.kernelbench.chain_steps.
Chain`):

- a call the reader does not fuse (the heavy operator, a norm or pooling layer, a view, any call
  it does not know; :mod:`codevolve.problems.kernelbench.chain_calls` says which it fuses) is a
  ``Let``: the statement as written, names renamed, after the values it reads are computed;
- elementwise operations (the lowerings of :mod:`codevolve.problems.kernelbench.lowerings`,
  activation modules included) and reductions (sum, mean, max, min, logsumexp over one run of
  dimensions, softmax and log-softmax over one, an adaptive average pool to one element) are
  pending (:mod:`codevolve.problems.kernelbench.chain_values`) until something else reads them;
  then they become one ``Launch`` of a fused kernel, or the one torch call they are when they
  are only one operation (a kernel of one operation saves nothing; a convolution's result counts
  its bias, which the kernel will add);
- exact simplifications on the way: a reduction over a dimension already reduced to size 1 is
  the identity (softmax there is ``x - x + 1``), ``clone``/``detach``/``contiguous`` and a
  dropout built with ``p = 0`` are the identity, ``x + x`` is ``2 * x``.

Any statement it does not read (a tuple assignment, an ``if``) is kept as written, so the chain
always computes what the forward computes; ``Chain.notes`` says what was kept and why.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import itertools
from collections.abc import Callable, Sequence

from codevolve.problems.kernelbench.calls import canonical_call, constant_value, dotted
from codevolve.problems.kernelbench.chain_calls import Calls
from codevolve.problems.kernelbench.chain_modules import (
    SCALAR_METHODS,
    Attributes,
    attributes,
    fresh_call,
    module_call,
    rank_of,
)
from codevolve.problems.kernelbench.chain_reduce import Reducer
from codevolve.problems.kernelbench.chain_steps import (
    Chain,
    Launch,
    Let,
    Renamer,
    Step,
    transposed_product,
)
from codevolve.problems.kernelbench.chain_values import (
    NotFusable,
    Opaque,
    Operand,
    Pending,
    Scalar,
    Tables,
    Tensor,
    Value,
    kernel_of,
    simplify,
)
from codevolve.problems.kernelbench.expressions import BINOPS
from codevolve.problems.kernelbench.forward import Forward, body_statements, method, model_class
from codevolve.problems.kernelbench.lowerings import NoTranslation, power
from codevolve.problems.kernelbench.tree import Const, Node, op

_SCALAR_TYPES = {"float", "int", "bool"}


def read_chain(tree: ast.Module) -> Chain | None:
    """The chain of ``ModelNew.forward``; None when there is no forward to read."""
    cls = model_class(tree)
    forward = method(cls, "forward") if cls is not None else None
    if cls is None or forward is None:
        return None
    args = forward.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or not args.args:
        return None
    reader = ChainReader(attributes(tree, cls), _prefix(tree))
    for arg in args.args[1:]:
        kind = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        scalar = kind in _SCALAR_TYPES
        reader.env[arg.arg] = (
            Scalar(reader.tables.param(arg.arg), arg.arg) if scalar else Tensor(arg.arg, local=True)
        )
        if not scalar:
            reader.locals.add(arg.arg)
    result = reader.run(body_statements(forward))
    signature = Forward(
        args_source=ast.unparse(args),
        returns_source=ast.unparse(forward.returns) if forward.returns else "",
        inputs=tuple(a.arg for a in args.args[1:]),
    )
    return Chain(signature, tuple(reader.steps), result, tuple(reader.guards), tuple(reader.notes))


def _prefix(tree: ast.Module) -> str:
    """A prefix for the new forward's variables that no name of the program starts with."""
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    prefix = "t_"
    while any(name.startswith(prefix) for name in names):
        prefix = "t" + prefix
    return prefix


class ChainReader:
    """Reads statements into steps; ``env`` maps the forward's names to values."""

    def __init__(self, attrs: Attributes, prefix: str) -> None:
        self.attrs = attrs
        self.prefix = prefix
        self.env: dict[str, Value] = {}
        self.tables = Tables()
        self.steps: list[Step] = []
        self.guards: list[str] = []
        self.notes: list[str] = []
        self.materialized: dict[Pending, Tensor] = {}
        # a call computed by a step of its own: its node's id -> (the node, kept alive, and
        # the variable holding its result)
        self.hoisted: dict[int, tuple[ast.expr, str]] = {}
        self.locals: set[str] = set()  # the new forward's tensor variables
        self._names = itertools.count()
        self._ops = itertools.count()
        self.reducer = Reducer(self)
        self.calls = Calls(self, self.reducer)

    # -- statements -----------------------------------------------------------------------------

    def run(self, body: Sequence[ast.stmt]) -> str:
        for stmt in body:
            if isinstance(stmt, ast.Return) and stmt.value is not None:
                return self._returned(stmt.value)
            target = _single_target(stmt)
            if target is not None and isinstance(stmt, ast.Assign | ast.AnnAssign):
                assert stmt.value is not None
                value = self.attempt(functools.partial(self.value, stmt.value))
                if not isinstance(value, str):
                    self.env[target] = value
                    continue
                self.note(stmt, value)
            self._kept(stmt)
        return "None"

    def attempt(self, read: Callable[[], Value]) -> Value | str:
        """``read()``, or why not: the steps, names and guards it added are taken back."""
        steps, guards = len(self.steps), list(self.guards)
        env, materialized, hoisted = dict(self.env), dict(self.materialized), dict(self.hoisted)
        try:
            return read()
        except (NotFusable, NoTranslation) as why:
            del self.steps[steps:]
            self.guards[:] = guards
            self.env, self.materialized, self.hoisted = env, materialized, hoisted
            return str(why) or type(why).__name__

    def _returned(self, expr: ast.expr) -> str:
        value = self.attempt(lambda: self.value(expr))
        if isinstance(value, Pending):
            value = self.materialize(value)
        if isinstance(value, Tensor):
            return value.source
        return self.rename(expr)[0]

    def _kept(self, stmt: ast.stmt) -> None:
        """A statement kept as written: the values it reads computed first, names renamed; the
        names it binds hold what it computes (a tensor for a call, opaque otherwise)."""
        text, reads = self.rename(stmt)
        target = _single_target(stmt)
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
        if target is None or value is None:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    self.env[node.id] = Opaque(node.id)
            self.steps.append(Let(text, "", reads))
            return
        source = ast.unparse(ast.parse(text).body[0].value)  # type: ignore[attr-defined]
        self.env[target] = self.library(value, source, reads)

    def note(self, stmt: ast.AST, why: str) -> None:
        line = ast.unparse(stmt).split("\n")[0]
        self.notes.append(f"kept: {line}" + (f" ({why})" if why else ""))

    # -- naming --------------------------------------------------------------------------------

    def op_id(self) -> int:
        """A new id for one eager operation (a pending value counts those it stands for)."""
        return next(self._ops)

    def fresh_name(self) -> str:
        return f"{self.prefix}{next(self._names)}"

    def rename(self, node: ast.AST) -> tuple[str, frozenset[str]]:
        """``node`` as source with the forward's names as the new forward holds them; pending
        values it reads are computed first."""
        reads: set[str] = set()
        memo: dict[int, object] = {}
        copied = copy.deepcopy(node, memo)
        # sub-expressions hoisted into steps of their own are read from their variables
        hoisted = {id(memo[key]): name for key, (_, name) in self.hoisted.items() if key in memo}
        renamed = Renamer(self, reads, hoisted).visit(copied)
        return ast.unparse(renamed), frozenset(reads)

    def library(self, expr: ast.expr, source: str, reads: frozenset[str]) -> Value:
        """``<new variable> = <source>``: a step kept as written, its result a tensor for a
        call or arithmetic on the forward's tensors, opaque otherwise (a shape, a size)."""
        name = self.fresh_name()
        ranks = {v.source: v.rank for v in self.env.values() if isinstance(v, Tensor)}
        renamed = ast.parse(source, mode="eval").body
        call = canonical_call(expr) if isinstance(expr, ast.Call) else None
        tensor_like = isinstance(expr, ast.Call) or (
            isinstance(expr, ast.BinOp | ast.UnaryOp) and bool(reads)
        )
        if not tensor_like or (call is not None and call.name in SCALAR_METHODS):
            self.steps.append(Let(f"{name} = {source}", name, reads))
            return Opaque(name)
        found = module_call(expr, self.attrs)
        module = kind = arg = ""
        single = isinstance(renamed, ast.Call) and len(renamed.args) == 1 and not renamed.keywords
        if found is not None and single:
            assert isinstance(renamed, ast.Call)
            module, kind, arg = found[0], found[1], ast.unparse(renamed.args[0])
        fresh = fresh_call(expr, self.attrs)
        weight = f"self.{module}.weight" if kind == "Linear" else ""
        product = transposed_product(renamed) if not module else None
        if product is not None:
            arg, weight = product
        let = Let(f"{name} = {source}", name, reads, module, kind, arg, fresh, weight)
        self.steps.append(let)
        self.locals.add(name)
        if isinstance(expr, ast.Call):
            rank = rank_of(renamed, ranks, self.attrs)
        else:  # arithmetic: the rank of the first tensor it reads (checked where it matters)
            rank = next((ranks[r] for r in sorted(reads) if ranks.get(r) is not None), None)
        return Tensor(name, rank=rank, local=True, fresh=fresh)

    # -- values --------------------------------------------------------------------------------

    def value(self, expr: ast.expr) -> Value:
        number = constant_value(expr)
        if number is not None:
            return Scalar(Const(number), repr(number))
        if isinstance(expr, ast.Name):
            return self._name(expr.id)
        chain = dotted(expr)
        if isinstance(expr, ast.Attribute) and chain == f"self.{expr.attr}":
            return self._attribute(expr.attr)
        if chain.startswith("self.") and chain.split(".")[1] in self.attrs.modules:
            return Scalar(self.tables.param(chain), chain)  # a module's setting: a number
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub | ast.UAdd):
            inner = self.value(expr.operand)
            if isinstance(expr.op, ast.UAdd):
                return inner
            return self.combine(expr, [inner], lambda n: op("neg", n[0]))
        if isinstance(expr, ast.BinOp):
            return self._binop(expr)
        if isinstance(expr, ast.Subscript | ast.Attribute):
            return self.reducer.indexed(expr)
        if isinstance(expr, ast.Call):
            return self.calls.call(expr)
        raise NotFusable(type(expr).__name__)

    def _name(self, name: str) -> Value:
        if name in self.env:
            value = self.env[name]
            if isinstance(value, Opaque):
                raise NotFusable(f"{name} is not a tensor the reader follows")
            return value
        if name in self.attrs.constants:
            return Scalar(self.tables.param(name), name)
        raise NotFusable(f"unknown name {name}")

    def _attribute(self, attr: str) -> Value:
        if attr in self.attrs.tensors:
            return Tensor(f"self.{attr}", rank=self.attrs.ranks.get(attr))
        if attr in self.attrs.scalars:
            return Scalar(self.tables.param(f"self.{attr}"), f"self.{attr}")
        raise NotFusable(f"self.{attr}")

    def _binop(self, expr: ast.BinOp) -> Value:
        left = self.value(expr.left)
        if isinstance(expr.op, ast.Pow):
            exponent = constant_value(expr.right)

            def raised(nodes: list[Node]) -> Node:
                result = power(nodes[0], exponent)
                if result is None:
                    raise NotFusable(f"power {exponent}")
                return result

            return self.combine(expr, [left], raised)
        name = BINOPS.get(type(expr.op))
        if name is None:
            raise NotFusable(type(expr.op).__name__)
        right = self.value(expr.right)
        return self.combine(expr, [left, right], lambda n: op(name, n[0], n[1]))

    def hoist(self, expr: ast.Call) -> Value:
        """A library call inside an expression: a step of its own, its result a tensor."""
        source, reads = self.rename(expr)
        value = self.library(expr, source, reads)
        if isinstance(value, Tensor | Opaque):
            self.hoisted[id(expr)] = (expr, value.source)
        return value

    # -- combining values -----------------------------------------------------------------------

    def combine(
        self, expr: ast.expr, values: list[Value], build: Callable[[list[Node]], Node]
    ) -> Value:
        """One elementwise operation over ``values``: a pending value on the first pending
        value's (or local tensor's) main, or a scalar, or a tensor expression of the module's."""
        if any(isinstance(v, Opaque) for v in values):
            raise NotFusable("an opaque value")
        simple = not any(isinstance(v, Pending) for v in values)
        torch_source = self.rename(expr)[0] if simple else ""
        if all(isinstance(v, Scalar) for v in values):
            nodes = [v.node for v in values if isinstance(v, Scalar)]
            return Scalar(simplify(build(nodes)), torch_source)
        frame = self._frame(values)
        if frame is None:  # tensors of the module and scalars: a torch expression
            return Tensor(torch_source)
        level = self._level(frame, values)
        nodes = [self._node(v, frame, level) for v in values]
        ops = frozenset().union(*(v.ops for v in values if isinstance(v, Pending)))
        groups = {v.group for v in values if isinstance(v, Pending) and v.group}
        return Pending(
            main=frame.main,
            node=simplify(build(nodes)),
            reduced=level.reduced,
            present=level.present,
            group=next(iter(groups), ()),
            ops=ops | {self.op_id()},
            torch=torch_source,
        )

    def _frame(self, values: list[Value]) -> Pending | None:
        """The pending value (or a local tensor as one) whose main the result is computed on."""
        for value in values:
            if isinstance(value, Pending):
                return value
        for value in values:
            if isinstance(value, Tensor) and value.local:
                return self.start(value)
        return None

    def start(self, tensor: Tensor) -> Pending:
        """A local tensor as a pending value on itself (no operation yet)."""
        present = tuple(range(tensor.rank)) if tensor.rank is not None else ()
        node = self.tables.slot(Operand(tensor.source))
        return Pending(main=tensor, node=node, present=present)

    def _level(self, frame: Pending, values: list[Value]) -> Pending:
        """The shape of the operation's result: the main's when any operand is full (a reduced
        operand that kept its dimensions broadcasts back), else the reduced operands'."""
        mine = [v for v in values if isinstance(v, Pending) and v.main == frame.main]
        full = any(not v.reduced for v in mine) or frame.main in values
        reduced = [v for v in mine if v.reduced]
        if reduced and not full:
            return reduced[0]
        return frame if not frame.reduced else self.start(frame.main)

    def _node(self, value: Value, frame: Pending, level: Pending) -> Node:
        if isinstance(value, Scalar):
            return value.node
        if isinstance(value, Pending) and not self._fits(value, frame, level):
            value = self.materialize(value)
        if isinstance(value, Pending):
            return value.node
        assert isinstance(value, Tensor)
        if level.reduced and value.local:
            # a tensor of forward's with a reduced value: it may widen the result (torch
            # broadcasts the reduced value onto it), which a kernel writing the reduced shape
            # cannot: that operation is left to torch
            raise NotFusable("a tensor of forward's with a reduced value")
        rank = len(level.present) if level.reduced else frame.main.rank
        if value.rank is not None and rank is not None and value.rank > rank:
            raise NotFusable(f"{value.source} would widen the value to {value.rank} dimensions")
        present = level.present if level.reduced else None
        return self.tables.slot(Operand(value.source, present))

    def _fits(self, value: Pending, frame: Pending, level: Pending) -> bool:
        """``value`` combines with the others at ``level`` in one kernel."""
        if value.main != frame.main:
            return False
        if value.group and level.group and value.group != level.group:
            return False
        if value.group and frame.group and value.group != frame.group:
            return False
        if not value.reduced:
            return not level.reduced
        if level.reduced:
            return (value.reduced, value.present) == (level.reduced, level.present)
        rank = frame.main.rank  # a reduced value broadcasts back where it kept its dimensions
        return rank is not None and value.present == tuple(range(rank))

    def materialize(self, value: Pending) -> Tensor:
        """``value`` computed: one fused kernel, or the one torch call it is."""
        if value in self.materialized:
            return self.materialized[value]
        kernel = kernel_of(value, self.tables)
        name = self.fresh_name()
        if self._convolved(value.main):  # its bias is added by the kernel (see fuse.py)
            kernel = dataclasses.replace(kernel, ops=kernel.ops + 1)
        rank = value.main.rank if value.full else len(value.present)
        if value.main.rank is None and not value.full:
            rank = None
        if kernel.ops < 2 and value.torch:
            names = {n.id for n in ast.walk(ast.parse(value.torch)) if isinstance(n, ast.Name)}
            reads = frozenset(names & self.locals)
            self.steps.append(Let(f"{name} = {value.torch}", name, reads, fresh=True))
        else:
            self.steps.append(Launch(name, kernel))
        tensor = Tensor(name, rank=rank, local=True, fresh=True)
        self.locals.add(name)
        self.materialized[value] = tensor
        for key, held in self.env.items():
            if held == value:
                self.env[key] = tensor
        return tensor

    def _convolved(self, tensor: Tensor) -> bool:
        """``tensor`` is a convolution module's result, bias added after it (as eager does)."""
        return any(
            isinstance(s, Let) and s.target == tensor.source and s.kind.startswith("Conv")
            for s in self.steps
        )


def _single_target(stmt: ast.stmt) -> str | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        target = stmt.target
    else:
        return None
    return target.id if isinstance(target, ast.Name) else None
