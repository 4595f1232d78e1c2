"""The loss pattern: the mean or sum of an elementwise expression over one or two tensors.

The second tensor may broadcast over the first's leading dimensions. Read either as
``torch.mean/sum(<elementwise expression>)`` over all elements, or as a named loss with its torch
defaults, lowered to primitives here: ``mse_loss``, ``l1_loss``, ``smooth_l1_loss``,
``huber_loss`` and ``kl_div`` (of ``log(p)``), with ``reduction`` ``mean`` or ``sum``
(``batchmean`` for ``kl_div``). Hinge is the plain form over ``torch.clamp``. KernelBench Level-1
problems 94, 96, 98, 100.

Not recognised: cross-entropy and triplet-margin losses (95, 99), the cosine-similarity loss,
``reduction='none'``, the legacy ``size_average``/``reduce`` flags, a mean over a dimension (a
row reduction, :mod:`codevolve.problems.kernelbench.rows`), three or more tensors.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from codevolve.problems.kernelbench.expressions import (
    Const,
    Lowering,
    Node,
    NoTranslation,
    Translator,
    bind,
    canonical_call,
    elementwise,
    op,
    template_operands,
)


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
