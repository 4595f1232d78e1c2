"""Operator patterns of a KernelBench ``ModelNew.forward``, read with ``ast`` and never run.

The forward's body is read as one expression: a docstring is skipped, ``name = expr`` statements
are substituted into the ``return``. Parameters of forward are tensors unless annotated ``float``,
``int`` or ``bool``. What the expression computes is matched against these patterns (the KernelBench
Level-1 problems each covers in brackets):

- :class:`Elementwise`: a chain of elementwise operations over one or two tensors of one shape
  (19-22 ReLU/LeakyReLU/Sigmoid/Tanh, 25-32 Swish, GELU, SELU, HardSigmoid, Softplus, Softsign,
  ELU, HardTanh, 88 MinGPTNewGelu, 5 matrix-scalar). Its expression becomes a :data:`Node` tree.
- :class:`Rowwise`: one pass (or two) along a dimension ``dim``: softmax, log-softmax (23, 24), a
  reduction sum/mean/max/min with or without keepdim (47-49, 53), and ``x / G`` or ``x * G`` where
  G is built from sums or means of elementwise maps of x over ``dim`` with keepdim (36 RMSNorm,
  38 L1, 39 L2).
- :class:`TwoPass`: statistics over the trailing dimensions in per-chunk partials, then an
  elementwise pass: a LayerNorm module (40, with or without affine) and the Frobenius norm (37).
- :class:`Loss`: the mean or sum of an elementwise expression over one or two tensors (the second
  may broadcast over the first's leading dimensions): MSE, Huber/smooth-L1, L1, KL divergence of
  ``log(p)``, hinge (94, 96, 98, 100).
- :class:`Scan`: a cumulative sum along the last dimension, reversed by flips, exclusive by the
  cat/narrow shift, masked by ``x * mask`` (89, 91, 92, 93).
- :class:`Matmul`: a product of two 2-D or 3-D tensors (or a batch of matrices times one matrix),
  operands possibly transposed, optionally under ``torch.triu``/``torch.tril`` (1-4, 6-10, 13-18).

:func:`rewrites` lists pure-torch rewrites of sub-expressions: ``torch.diag(a) @ B`` as a
broadcast product (12), ``torch.max/min(x, dim)[0]`` as ``amax``/``amin`` (49, 53), the
cat/narrow exclusive cumsum as ``cumsum(x) - x`` (92), and any multi-op elementwise chain of one
tensor that equals a fused torch built-in (silu, GELU, mish, softplus, hardswish, ...: 25, 88),
identified by evaluating both on points.

Limits, as built: a scan template scans the last dimension (another falls back to torch); the
triangular product skips the K blocks that are zero when the inputs are triangular, as those
problems' ``get_inputs`` make them (tunable ``SKIP_ZERO_K = 0`` computes the whole product).
Where a template can honestly beat eager on an H200: chains of several ops, the norms and the
losses (one or two passes over memory instead of one per op), the exclusive cumsum (no cat copy)
and the triangular products (a sixth of the flops). A single op (ReLU, sigmoid, softmax, a sum)
is one memory-bound pass in eager too: a tie at best. A plain fp32 product in ``ieee`` precision
(FMA, no tensor cores) should lose to cuBLAS; the evolution decides, the template only starts it.

Not touched, honestly: convolutions (50-87), pooling (41-46), attention (97), batch, instance and
group norms (33-35), argmax/argmin (51, 52), cumprod (90), cross-entropy and triplet-margin losses
(95, 99), cosine-similarity loss, 4-D einsum products (11), and any forward that calls a helper
function or an ``nn`` module other than LayerNorm.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from codevolve.core.pysource import parse_python
from codevolve.problems.kernelbench.expressions import (
    BINOPS,
    SELU_ALPHA,
    SELU_SCALE,
    Call,
    Const,
    Count,
    Input,
    Lowering,
    Node,
    NoTranslation,
    Op,
    Stat,
    Translator,
    bind,
    canonical_call,
    constant_value,
    dotted,
    elementwise,
    evaluate,
    op,
    op_count,
    power,
    tanh_gelu,
)

# --- the patterns ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Forward:
    """What a template needs of the parent's ``forward``: its signature and its inputs."""

    args_source: str  # the parameters as written, ``self`` included
    returns_source: str  # the return annotation, or ""
    inputs: tuple[str, ...]  # the parameter names after self, in order


@dataclass(frozen=True, slots=True)
class Elementwise:
    tensors: tuple[str, ...]  # forward parameters loaded, slot order
    expr: Node
    params: tuple[str, ...]  # Python source of each Param slot, evaluated in forward


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


@dataclass(frozen=True, slots=True)
class Loss:
    tensors: tuple[str, ...]  # one or two; the second may broadcast over the first
    expr: Node
    params: tuple[str, ...]
    divisor: str  # "numel", "batch" (the first input's size(0)) or "one"


@dataclass(frozen=True, slots=True)
class Scan:
    tensor: str
    dim: str
    reverse: bool = False
    exclusive: bool = False
    mask: str = ""  # a forward parameter multiplied in, or ""


@dataclass(frozen=True, slots=True)
class Matmul:
    a: str  # Python source of each operand (a parameter, maybe transposed)
    b: str
    triangle: str = ""  # "", "upper" or "lower"


Pattern = Elementwise | Rowwise | TwoPass | Loss | Scan | Matmul


@dataclass(frozen=True, slots=True)
class Recognised:
    forward: Forward
    pattern: Pattern


# --- reading the class -------------------------------------------------------------------------

_SCALAR_TYPES = {"float", "int", "bool"}


def model_class(tree: ast.Module) -> ast.ClassDef | None:
    return next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None
    )


def method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def recognise(tree: ast.Module) -> Recognised | None:
    """The pattern ``ModelNew.forward`` computes, or None."""
    cls = model_class(tree)
    forward = method(cls, "forward") if cls is not None else None
    if cls is None or forward is None:
        return None
    args = forward.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or not args.args:
        return None
    names = [a.arg for a in args.args[1:]]
    tensors = [a.arg for a in args.args[1:] if _annotation(a) not in _SCALAR_TYPES]
    expr = returned_expression(forward)
    if expr is None:
        return None
    signature = Forward(
        args_source=ast.unparse(args),
        returns_source=ast.unparse(forward.returns) if forward.returns else "",
        inputs=tuple(names),
    )
    modules = _modules(cls)
    # attributes __init__ builds by a call (a Parameter, a buffer, a module) are no scalars:
    # a pattern that would read one as a float parameter is not taken
    built = {f"self.{attr}" for attr, maker in modules.items() if maker not in _SCALAR_MAKERS}
    for match in _MATCHERS:
        pattern = match(expr, tensors, modules)
        if pattern is not None:
            params = getattr(pattern, "params", ())
            if any(_reads(source, built) for source in params):
                return None
            return Recognised(signature, pattern)
    return None


_SCALAR_MAKERS = {"float", "int", "bool", "sqrt", "exp", "log"}


def _reads(source: str, attributes: set[str]) -> bool:
    tree = ast.parse(source, mode="eval")
    return any(isinstance(n, ast.Attribute) and dotted(n) in attributes for n in ast.walk(tree))


def _annotation(arg: ast.arg) -> str:
    return ast.unparse(arg.annotation) if arg.annotation is not None else ""


def body_statements(forward: ast.FunctionDef) -> list[ast.stmt]:
    """The body after the docstring."""
    body = forward.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1:]
    return body


def returned_expression(forward: ast.FunctionDef, *, single_use: bool = False) -> ast.expr | None:
    """The returned expression with the body's single-name assignments substituted, or None.

    With ``single_use``, None also when an assigned name is read more than once (substituting it
    would compute it twice)."""
    env: dict[str, ast.expr] = {}
    body = body_statements(forward)
    if single_use:
        reads = [n.id for s in body for n in ast.walk(s) if isinstance(n, ast.Name)]
        assigned = {
            t.id
            for s in body
            for t in ast.walk(s)
            if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
        }
        if any(reads.count(name) > 2 for name in assigned):  # the store itself is one
            return None
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        elif isinstance(stmt, ast.Return) and stmt.value is not None:
            return _substitute(stmt.value, env)
        else:
            return None
        if not isinstance(target, ast.Name):
            return None
        env[target.id] = _substitute(value, env)
    return None


class _Substitute(ast.NodeTransformer):
    def __init__(self, env: dict[str, ast.expr]) -> None:
        self.env = env

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return copy.deepcopy(self.env[node.id]) if node.id in self.env else node


def _substitute(expr: ast.expr, env: dict[str, ast.expr]) -> ast.expr:
    result = _Substitute(env).visit(copy.deepcopy(expr))
    assert isinstance(result, ast.expr)
    return result


def _modules(cls: ast.ClassDef) -> dict[str, str]:
    """``self.<attr> = nn.<Module>(...)`` assignments of ``__init__``: attribute -> module name."""
    init = method(cls, "__init__")
    found: dict[str, str] = {}
    for node in ast.walk(init) if init is not None else []:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(target := node.targets[0], ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and isinstance(node.value, ast.Call)
        ):
            found[target.attr] = dotted(node.value.func).rsplit(".", 1)[-1]
    return found


# --- matchers, most specific first -------------------------------------------------------------

Matcher = Callable[[ast.expr, Sequence[str], dict[str, str]], Pattern | None]


def _dim_and_keepdim(call: Call, names: Sequence[str]) -> tuple[str, bool] | None:
    """The ``dim`` (source) and ``keepdim`` (a literal) of a reduction call, if both are plain."""
    bound = bind(call, names, {"keepdim": False, "dtype": None})
    dim, keepdim = bound.get("dim"), bound.get("keepdim")
    if not isinstance(dim, ast.expr) or bound.get("dtype") is not None:
        return None
    if isinstance(keepdim, ast.Constant) and isinstance(keepdim.value, bool):
        return ast.unparse(dim), keepdim.value
    return (ast.unparse(dim), False) if keepdim is False else None


def match_matmul(expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]) -> Pattern | None:
    del modules
    triangle = ""
    call = canonical_call(expr)
    if call is not None and call.name in ("triu", "tril") and len(call.args) == 1:
        if call.keywords and ast.unparse(call.keywords.get("diagonal", ast.Constant(0))) != "0":
            return None
        triangle, expr = ("upper" if call.name == "triu" else "lower"), call.args[0]
    operands = _product_operands(expr)
    if operands is None:
        return None
    a, b = (_operand(o, tensors) for o in operands)
    return Matmul(a, b, triangle) if a and b else None


def _product_operands(expr: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.MatMult):
        return expr.left, expr.right
    call = canonical_call(expr)
    if call is not None and call.name in ("matmul", "mm", "bmm") and len(call.args) == 2:
        return call.args[0], call.args[1]
    return None


def _operand(expr: ast.expr, tensors: Sequence[str]) -> str:
    """A parameter, maybe transposed (``A.T``, ``A.t()``, ``A.transpose(-2, -1)``), else ""."""
    if isinstance(expr, ast.Name) and expr.id in tensors:
        return expr.id
    if isinstance(expr, ast.Attribute) and expr.attr in ("T", "mT"):
        return ast.unparse(expr) if _operand(expr.value, tensors) else ""
    call = canonical_call(expr)
    if call is not None and call.name in ("t", "transpose") and _operand(call.args[0], tensors):
        return ast.unparse(expr)
    return ""


def match_scan(expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]) -> Pattern | None:
    del modules
    reverse = False
    call = canonical_call(expr)
    if call is not None and call.name == "flip" and len(call.args) == 2:
        reverse, flip_dim = True, ast.unparse(call.args[1])
        call = canonical_call(call.args[0])
    if call is None or call.name != "cumsum":
        return None
    bound = bind(call, ("input", "dim"), {"dtype": None})
    inner, dim = bound.get("input"), bound.get("dim")
    if not isinstance(inner, ast.expr) or not isinstance(dim, ast.expr) or bound.get("dtype"):
        return None
    dim_source = ast.unparse(dim)
    if reverse:
        flipped = canonical_call(inner)
        if flipped is None or flipped.name != "flip" or len(flipped.args) != 2:
            return None
        if {ast.unparse(flipped.args[1]), flip_dim} != {dim_source}:
            return None
        inner = flipped.args[0]
    exclusive = _exclusive_shift(inner, dim_source)
    if exclusive is not None:
        inner = exclusive
    mask = ""
    if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Mult):
        left, right = inner.left, inner.right
        if isinstance(right, ast.Name) and right.id in tensors:
            inner, mask = left, right.id
    if not (isinstance(inner, ast.Name) and inner.id in tensors):
        return None
    return Scan(inner.id, dim_source, reverse, exclusive is not None, mask)


def _exclusive_shift(expr: ast.expr, dim: str) -> ast.expr | None:
    """x of ``torch.cat((zeros_like(...), x), dim=D).narrow(D, 0, n)``: the series shifted by
    one with a leading zero, whose cumsum is the exclusive cumsum of x."""
    narrow = canonical_call(expr)
    if narrow is None or narrow.name != "narrow" or len(narrow.args) != 4:
        return None
    if ast.unparse(narrow.args[1]) != dim or ast.unparse(narrow.args[2]) != "0":
        return None
    cat = canonical_call(narrow.args[0])
    if cat is None or cat.name not in ("cat", "concat", "concatenate") or len(cat.args) != 1:
        return None
    parts = cat.args[0]
    cat_dim = cat.keywords.get("dim")
    if not isinstance(parts, ast.Tuple | ast.List) or len(parts.elts) != 2:
        return None
    if cat_dim is None or ast.unparse(cat_dim) != dim:
        return None
    zeros, series = parts.elts
    if "zeros" not in ast.unparse(zeros):
        return None
    return series


def match_softmax(
    expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]
) -> Pattern | None:
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


def _values_of(expr: ast.expr) -> ast.expr | None:
    """``call`` of ``call[0]`` or ``call.values``: the values of a (values, indices) pair."""
    if isinstance(expr, ast.Subscript) and ast.unparse(expr.slice) == "0":
        return expr.value
    if isinstance(expr, ast.Attribute) and expr.attr == "values":
        return expr.value
    return None


_REDUCERS = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "max": "max", "min": "min"}


def match_reduce(expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]) -> Pattern | None:
    del modules
    indexed = _values_of(expr)
    if indexed is not None:
        expr = indexed
    call = canonical_call(expr)
    if call is None or call.name not in _REDUCERS:
        return None
    if (call.name in ("max", "min")) != (indexed is not None):
        return None  # torch.max(x, dim) is a (values, indices) pair; only its values are taken
    plain = _dim_and_keepdim(call, ("input", "dim", "keepdim"))
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
) -> Pattern | None:
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
        if not any(isinstance(n, ast.Name) and n.id in self.tensors for n in ast.walk(expr)):
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
            plain = _dim_and_keepdim(call, ("input", "dim", "keepdim"))
            mapped = self._map(call.args[0]) if call.args else None
            if plain is None or not plain[1] or mapped is None or not self._same_dim(plain[0]):
                return None
            total = self._stat(mapped)
            return op("div", total, Count()) if call.name == "mean" else total
        if call.name in ("norm", "vector_norm"):
            order_name = "p" if call.name == "norm" else "ord"
            plain = _dim_and_keepdim(call, ("input", order_name, "dim", "keepdim"))
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
) -> Pattern | None:
    if (
        isinstance(expr, ast.Call)
        and len(expr.args) == 1
        and not expr.keywords
        and isinstance(expr.func, ast.Attribute)
        and dotted(expr.func.value) == "self"
        and modules.get(expr.func.attr) == "LayerNorm"
        and isinstance(x := expr.args[0], ast.Name)
        and x.id in tensors
    ):
        return TwoPass(x.id, "layernorm", module=expr.func.attr)
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


def match_loss(expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]) -> Pattern | None:
    del modules
    call = canonical_call(expr)
    if call is None:
        return None
    if call.name in ("mean", "sum") and len(call.args) == 1 and not call.keywords:
        mapped = elementwise(call.args[0], tensors)
        return _loss(mapped, "numel" if call.name == "mean" else "one", tensors)
    lowering = _NAMED_LOSSES.get(call.name)
    if lowering is None:
        return None
    bound = bind(call, lowering.names, lowering.defaults)
    reduction = bound.get("reduction") or "mean"
    if isinstance(reduction, ast.Constant):
        reduction = reduction.value
    if bound.get("size_average") is not None or bound.get("reduce") is not None:
        return None
    divisor = {"mean": "numel", "sum": "one", "batchmean": "batch"}.get(str(reduction))
    if divisor is None or (divisor == "batch" and call.name != "kl_div"):
        return None
    translator = Translator(tensors)
    try:
        node = translator.call(call, _NAMED_LOSSES)
    except NoTranslation:
        return None
    return _loss(None if node is None else (node, translator), divisor, tensors)


def _loss(
    mapped: tuple[Node, Translator] | None, divisor: str, tensors: Sequence[str]
) -> Loss | None:
    if mapped is None:
        return None
    node, translator = mapped
    used = sorted(translator.used)
    if len(used) > 2:
        return None
    order = {slot: i for i, slot in enumerate(used)}
    return Loss(
        tuple(tensors[s] for s in used),
        _renumber(node, order),
        tuple(translator.params),
        divisor,
    )


def _renumber(node: Node, order: dict[int, int]) -> Node:
    if isinstance(node, Input):
        return Input(order[node.slot])
    if isinstance(node, Op):
        return Op(node.name, tuple(_renumber(a, order) for a in node.args))
    return node


def _huber(d: Node, delta: Node, *, smooth: bool) -> Node:
    a = op("abs", d)
    if smooth:  # smooth_l1: 0.5 d^2 / beta below beta, |d| - beta / 2 above
        inside = op("div", op("mul", Const(0.5), op("mul", d, d)), delta)
        outside = op("sub", a, op("mul", Const(0.5), delta))
    else:  # huber: 0.5 d^2 below delta, delta (|d| - delta / 2) above
        inside = op("mul", Const(0.5), op("mul", d, d))
        outside = op("mul", delta, op("sub", a, op("mul", Const(0.5), delta)))
    return op("where", op("lt", a, delta), inside, outside)


def _kl(input: Node, target: Node) -> Node:
    # kl_div(input, target) = target * (log(target) - input), 0 where target is 0
    value = op("mul", target, op("sub", op("log", target), input))
    return op("where", op("gt", target, Const(0.0)), value, Const(0.0))


def _loss_lowering(names: str, build: Callable[..., Node], **defaults: object) -> Lowering:
    # the reduction and the legacy size_average/reduce flags are read by match_loss
    flags = {"reduction": None, "size_average": None, "reduce": None}
    return Lowering(tuple(names.split()), {**flags, **defaults}, lambda n, f: build(**n))


def _square(x: Node) -> Node:
    return op("mul", x, x)


_NAMED_LOSSES: dict[str, Lowering] = {
    "mse_loss": _loss_lowering(
        "input target size_average reduce reduction",
        lambda input, target: _square(op("sub", input, target)),
    ),
    "l1_loss": _loss_lowering(
        "input target size_average reduce reduction",
        lambda input, target: op("abs", op("sub", input, target)),
    ),
    "smooth_l1_loss": _loss_lowering(
        "input target size_average reduce reduction beta",
        lambda input, target, beta: _huber(op("sub", input, target), beta, smooth=True),
        beta=1.0,
    ),
    "huber_loss": _loss_lowering(
        "input target reduction delta",
        lambda input, target, delta: _huber(op("sub", input, target), delta, smooth=False),
        delta=1.0,
    ),
    "kl_div": _loss_lowering("input target size_average reduce reduction", _kl),
}


def match_elementwise(
    expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]
) -> Pattern | None:
    del modules
    mapped = elementwise(expr, tensors)
    if mapped is None:
        return None
    node, translator = mapped
    used = sorted(translator.used)
    if len(used) > 2:
        return None
    order = {slot: i for i, slot in enumerate(used)}
    return Elementwise(
        tuple(tensors[s] for s in used), _renumber(node, order), tuple(translator.params)
    )


_MATCHERS: tuple[Matcher, ...] = (
    match_matmul,
    match_scan,
    match_softmax,
    match_loss,
    match_reduce,
    match_two_pass,
    match_normalize,
    match_elementwise,
)


# --- pure-torch rewrites ------------------------------------------------------------------------


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
    operands = _product_operands(node)
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
    pair = _values_of(node)
    call = canonical_call(pair) if pair is not None else None
    if call is None or call.name not in ("max", "min") or not call.args:
        return None
    plain = _dim_and_keepdim(call, ("input", "dim", "keepdim"))
    if plain is None:
        return None
    dim, keepdim = plain
    source = f"torch.a{call.name}({ast.unparse(call.args[0])}, dim={dim}, keepdim={keepdim})"
    return Rewrite(f"a{call.name}", node, source)


def _exclusive_cumsum(node: ast.expr, names: Sequence[str]) -> Rewrite | None:
    del names
    call = canonical_call(node)
    if call is None or call.name != "cumsum":
        return None
    bound = bind(call, ("input", "dim"), {"dtype": None})
    inner, dim = bound.get("input"), bound.get("dim")
    if not isinstance(inner, ast.expr) or not isinstance(dim, ast.expr) or bound.get("dtype"):
        return None
    series = _exclusive_shift(inner, ast.unparse(dim))
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
