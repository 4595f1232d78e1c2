"""The loss patterns: a scalar mean or sum over one, two or three tensors.

:class:`Loss`: the mean or sum of an elementwise expression over one or two tensors; the second
may broadcast over the first's leading dimensions. Read either as
``torch.mean/sum(<elementwise expression>)`` over all elements, or as a named loss with its torch
defaults, lowered to primitives here: ``mse_loss``, ``l1_loss``, ``smooth_l1_loss``,
``huber_loss`` and ``kl_div`` (of ``log(p)``), with ``reduction`` ``mean`` or ``sum``
(``batchmean`` for ``kl_div``). Hinge is the plain form over ``torch.clamp``. KernelBench Level-1
problems 94, 96, 98, 100.

:class:`CrossEntropy` (95): ``cross_entropy`` of 2-D logits against class indices, with a literal
``ignore_index`` (rows whose target it is count for neither sum nor mean). :class:`TripletMargin`
(99): ``triplet_margin_loss`` with ``p=2``, ``swap=False`` and a literal ``eps``; its margin a
literal, a scalar forward computes or the module's own ``margin``. Both with ``reduction``
``mean`` or ``sum``, called as functions or through an ``nn.CrossEntropyLoss`` /
``nn.TripletMarginLoss`` module that ``__init__`` builds (:func:`functional_form` reads the
module's constructor arguments).

Not recognised: the cosine-similarity loss, ``reduction='none'``, the legacy
``size_average``/``reduce`` flags, a mean over a dimension (a row reduction,
:mod:`codevolve.problems.kernelbench.rows`), three or more tensors in an elementwise loss;
cross-entropy with ``weight``, ``label_smoothing`` or a non-literal ``ignore_index``; triplet
margin with another ``p``, ``swap=True`` or a non-literal ``eps``. (What only the inputs tell,
class-probability targets, say, is the template's fallback to torch.)
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from codevolve.problems.kernelbench.calls import bind, canonical_call, constant_value, dotted
from codevolve.problems.kernelbench.expressions import (
    Translator,
    elementwise,
    mentions,
    template_operands,
)
from codevolve.problems.kernelbench.forward import callee
from codevolve.problems.kernelbench.lowerings import Lowering, NoTranslation
from codevolve.problems.kernelbench.tree import Const, Node, op


@dataclass(frozen=True, slots=True)
class Loss:
    tensors: tuple[str, ...]  # one or two; the second may broadcast over the first
    expr: Node
    params: tuple[str, ...]
    divisor: str  # "numel", "batch" (the first input's size(0)) or "one"


def match_loss(expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]) -> Loss | None:
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
    operands = template_operands(mapped, tensors)
    return None if operands is None else Loss(*operands, divisor)


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


# --- losses computed row by row: cross-entropy and triplet margin -----------------------------


@dataclass(frozen=True, slots=True)
class CrossEntropy:
    """``cross_entropy(logits, target)``: logits (batch, classes), target class indices."""

    logits: str
    target: str
    ignore_index: int  # rows with this target count for neither the sum nor the mean
    mean: bool  # reduction mean (else sum)


@dataclass(frozen=True, slots=True)
class TripletMargin:
    """``mean(clamp(d(a, p) - d(a, n) + margin, min=0))`` with ``d(x, y) = ||x - y + eps||_2``
    along the last dimension, torch's pairwise distance."""

    tensors: tuple[str, str, str]  # anchor, positive, negative
    margin: str  # Python source of the margin, evaluated in forward
    eps: float
    mean: bool  # reduction mean (else sum)
    # the margin when forward computes it: recognise refuses one reading a module or a Parameter
    # (a margin a TripletMarginLoss module holds is its float attribute, not listed here)
    params: tuple[str, ...] = ()


# Loss modules and their functional forms: the function, then the constructor's parameters in
# order (``TripletMarginLoss(margin, p, ...)`` is ``triplet_margin_loss(a, p, n, margin, p, ...)``).
_LOSS_MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "CrossEntropyLoss": (
        "cross_entropy",
        ("weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"),
    ),
    "TripletMarginLoss": (
        "triplet_margin_loss",
        ("margin", "p", "eps", "swap", "size_average", "reduce", "reduction"),
    ),
}
_CROSS_ENTROPY = ("input", "target", *_LOSS_MODULES["CrossEntropyLoss"][1])
_TRIPLET = ("anchor", "positive", "negative", *_LOSS_MODULES["TripletMarginLoss"][1])
_LEGACY: dict[str, object] = {"size_average": None, "reduce": None, "reduction": "mean"}


def functional_form(expr: ast.expr, calls: dict[str, ast.Call]) -> ast.expr:
    """``self.<attr>(...)`` of a loss module that ``__init__`` builds (``calls``: attribute ->
    the call building it) as the functional call with the constructor's arguments; any other
    expression as it is. An argument that is no literal (an init input) becomes the module's
    attribute of that name, read in forward: the matchers take only the margin that way."""
    if not (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and dotted(expr.func.value) == "self"
        and not expr.keywords
        and (built := calls.get(expr.func.attr)) is not None
        and (form := _LOSS_MODULES.get(callee(built))) is not None
    ):
        return expr
    function, names = form
    if len(built.args) > len(names) or any(k.arg is None for k in built.keywords):
        return expr
    given: dict[str, ast.expr] = dict(zip(names, built.args, strict=False))
    given.update({k.arg: k.value for k in built.keywords if k.arg is not None})
    held = f"self.{expr.func.attr}"
    keywords = [
        ast.keyword(
            name, value if _literal(value) is not _NOT_LITERAL else _source(f"{held}.{name}")
        )
        for name, value in given.items()
    ]
    return ast.Call(_source(f"F.{function}"), list(expr.args), keywords)


def _source(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


_NOT_LITERAL = object()


def _literal(value: object) -> object:
    """A bound argument's Python value: a default as it is, a literal's value (numbers folded),
    :data:`_NOT_LITERAL` for anything forward would have to compute."""
    if not isinstance(value, ast.expr):
        return value
    if isinstance(value, ast.Constant):
        return value.value
    number = constant_value(value)
    return _NOT_LITERAL if number is None else number


def _number(value: object) -> float | None:
    literal = _literal(value)
    if isinstance(literal, bool) or not isinstance(literal, int | float):
        return None
    return float(literal)


def _mean(bound: dict[str, object]) -> bool | None:
    """True for reduction mean, False for sum, None for anything else or a legacy flag."""
    if _literal(bound["size_average"]) is not None or _literal(bound["reduce"]) is not None:
        return None
    return {"mean": True, "sum": False}.get(str(_literal(bound["reduction"])))


def _tensors(
    bound: dict[str, object], keys: tuple[str, ...], tensors: Sequence[str]
) -> tuple[str, ...] | None:
    """The tensor parameters of forward passed as ``keys``, or None if any is something else."""
    values = [bound.get(k) for k in keys]
    names = tuple(v.id for v in values if isinstance(v, ast.Name) and v.id in tensors)
    return names if len(names) == len(keys) else None


def match_cross_entropy(
    expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]
) -> CrossEntropy | None:
    del modules
    call = canonical_call(expr)
    if call is None or call.name != "cross_entropy":
        return None
    defaults: dict[str, object] = {
        "weight": None,
        "ignore_index": -100,
        "label_smoothing": 0.0,
        **_LEGACY,
    }
    bound = bind(call, _CROSS_ENTROPY, defaults)
    pair = _tensors(bound, ("input", "target"), tensors) if bound else None
    if pair is None:
        return None
    mean, ignore = _mean(bound), _number(bound["ignore_index"])
    if (
        mean is None
        or _literal(bound["weight"]) is not None
        or _number(bound["label_smoothing"]) != 0
    ):
        return None
    if ignore is None or not ignore.is_integer():
        return None
    logits, target = pair
    return CrossEntropy(logits, target, int(ignore), mean)


def match_triplet_margin(
    expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]
) -> TripletMargin | None:
    call = canonical_call(expr)
    if call is None or call.name != "triplet_margin_loss":
        return None
    defaults: dict[str, object] = {"margin": 1.0, "p": 2.0, "eps": 1e-6, "swap": False, **_LEGACY}
    bound = bind(call, _TRIPLET, defaults)
    triple = _tensors(bound, ("anchor", "positive", "negative"), tensors) if bound else None
    if triple is None:
        return None
    mean, eps = _mean(bound), _number(bound["eps"])
    if (
        mean is None
        or eps is None
        or _number(bound["p"]) != 2.0
        or _literal(bound["swap"]) is not False
    ):
        return None
    margin = bound["margin"]
    value = _number(margin)
    params: tuple[str, ...] = ()
    if value is not None:
        source = repr(value)
    elif isinstance(margin, ast.expr) and not mentions(margin, tensors):
        source = ast.unparse(margin)
        if not _held_margin(source, modules):
            params = (source,)
    else:
        return None
    anchor, positive, negative = triple
    return TripletMargin((anchor, positive, negative), source, eps, mean, params)


def _held_margin(source: str, modules: dict[str, str]) -> bool:
    """``self.<attr>.margin`` of a TripletMarginLoss module ``__init__`` builds: a float."""
    parts = source.split(".")
    return (
        len(parts) == 3
        and parts[0] == "self"
        and parts[2] == "margin"
        and modules.get(parts[1]) == "TripletMarginLoss"
    )
