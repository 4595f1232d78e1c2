"""Operator patterns of a KernelBench ``ModelNew.forward``, read with ``ast`` and never run.

The forward is read as one returned expression (:mod:`codevolve.problems.kernelbench.forward`).
Parameters of forward are tensors unless annotated ``float``, ``int`` or ``bool``. What the
expression computes is matched against these patterns, most specific first (each module says
how, and what it does not recognise; the KernelBench Level-1 problems each covers in brackets):

- :class:`~codevolve.problems.kernelbench.matmul.Matmul`: a product of two 2-D or 3-D tensors,
  possibly transposed, possibly under ``torch.triu``/``torch.tril`` (1-4, 6-10, 13-18).
- :class:`~codevolve.problems.kernelbench.scans.Scan`: a cumulative sum or product along a
  dimension, reversed, exclusive (also as problem 92 writes it) or masked (89-93).
- :class:`~codevolve.problems.kernelbench.rows.Rowwise`: softmax and log-softmax (23, 24), a
  reduction (47-49, 53), a normalisation ``x / G`` along one dimension (36 RMSNorm, 38 L1,
  39 L2); and :class:`~codevolve.problems.kernelbench.rows.TwoPass`: a LayerNorm module (40),
  the Frobenius norm (37).
- :class:`~codevolve.problems.kernelbench.losses.Loss`: the mean or sum of an elementwise
  expression over one or two tensors, named losses included (94, 96, 98, 100);
  :class:`~codevolve.problems.kernelbench.losses.CrossEntropy` (95) and
  :class:`~codevolve.problems.kernelbench.losses.TripletMargin` (99), as functions or as the
  ``nn`` loss modules ``__init__`` builds (read as their functional form, the constructor's
  arguments included).
- :class:`~codevolve.problems.kernelbench.pools.Pool`: a max- or average-pooling module (41-46).
- :class:`~codevolve.problems.kernelbench.convs.Conv`: a convolution module, ``Conv1d/2d/3d``
  or ``ConvTranspose1d/2d/3d`` (50, 54-85, 87): an implicit-GEMM or a depthwise Triton kernel
  and a product over unfolded patches for 1-D and 2-D ones, cuDNN's settings for every form.
- :class:`~codevolve.problems.kernelbench.elementwise.Elementwise`: a chain of elementwise
  operations over one or two tensors of one shape (5, 19-22, 25-32, 88).

A pattern whose scalar parameters read an attribute ``__init__`` builds by a call (a Parameter,
a buffer, a module; ``float(...)``, ``math.sqrt(...)`` and the like give numbers) is not taken:
the template would pass a tensor as a float. The pure-torch
rewrites of sub-expressions are in :mod:`codevolve.problems.kernelbench.rewrites`.

Not recognised by any pattern: a depthwise convolution then a pointwise one (86), attention
(97), batch, instance and group norms (33-35), argmax/argmin (51, 52), cosine-similarity loss,
4-D einsum products (11), and any forward that calls a helper function or an ``nn`` module other
than LayerNorm, CrossEntropyLoss, TripletMarginLoss and the convolutions. A whole model that
builds convolution modules (86, KernelBench Level 3's convolutional nets) is no pattern: the
``model`` move puts it behind cuDNN's settings
(:mod:`codevolve.problems.kernelbench.model_cudnn`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from codevolve.problems.kernelbench.calls import dotted
from codevolve.problems.kernelbench.convs import Conv, match_conv, with_groups
from codevolve.problems.kernelbench.elementwise import Elementwise, match_elementwise
from codevolve.problems.kernelbench.forward import (
    Forward,
    callee,
    init_calls,
    method,
    model_class,
    returned_expression,
    signature,
)
from codevolve.problems.kernelbench.losses import (
    CrossEntropy,
    Loss,
    TripletMargin,
    functional_form,
    match_cross_entropy,
    match_loss,
    match_triplet_margin,
)
from codevolve.problems.kernelbench.matmul import Matmul, match_matmul
from codevolve.problems.kernelbench.pools import Pool, match_pool
from codevolve.problems.kernelbench.rows import (
    Rowwise,
    TwoPass,
    match_normalize,
    match_reduce,
    match_softmax,
    match_two_pass,
)
from codevolve.problems.kernelbench.scans import Scan, match_scan

Pattern = (
    Elementwise
    | Rowwise
    | TwoPass
    | Loss
    | CrossEntropy
    | TripletMargin
    | Scan
    | Matmul
    | Pool
    | Conv
)


@dataclass(frozen=True, slots=True)
class Recognised:
    forward: Forward
    pattern: Pattern


# A matcher reads the returned expression, the forward's tensor parameters and the attributes
# ``__init__`` builds (attribute -> callee name); None when its pattern is not there.
Matcher = Callable[[ast.expr, Sequence[str], dict[str, str]], Pattern | None]

_MATCHERS: tuple[Matcher, ...] = (
    match_matmul,
    match_scan,
    match_pool,
    match_conv,
    match_softmax,
    match_loss,
    match_cross_entropy,
    match_triplet_margin,
    match_reduce,
    match_two_pass,
    match_normalize,
    match_elementwise,
)
_SCALAR_TYPES = {"float", "int", "bool"}  # annotations of forward's non-tensor parameters
_SCALAR_MAKERS = {"float", "int", "bool", "sqrt", "exp", "log"}  # __init__ calls giving a number


def recognise(tree: ast.Module) -> Recognised | None:
    """The pattern ``ModelNew.forward`` computes, or None."""
    cls = model_class(tree)
    forward = method(cls, "forward") if cls is not None else None
    if cls is None or forward is None:
        return None
    found = signature(forward)
    if found is None:
        return None
    tensors = [a.arg for a in forward.args.args[1:] if _annotation(a) not in _SCALAR_TYPES]
    calls = init_calls(cls)
    expr = returned_expression(forward)
    if expr is None:
        return None
    expr = functional_form(expr, calls)  # a loss module held in __init__, as its function
    modules = {attr: callee(call) for attr, call in calls.items()}
    # attributes __init__ builds by a call (a Parameter, a buffer, a module) are no scalars:
    # a pattern that would read one as a float parameter is not taken
    built = {f"self.{attr}" for attr, maker in modules.items() if maker not in _SCALAR_MAKERS}
    for match in _MATCHERS:
        pattern = match(expr, tensors, modules)
        if pattern is not None:
            params = getattr(pattern, "params", ())
            if any(_reads(source, built) for source in params):
                return None
            if isinstance(pattern, Conv):  # which templates fit: the groups as written
                pattern = with_groups(pattern, calls[pattern.module])
            return Recognised(found, pattern)
    return None


def _reads(source: str, attributes: set[str]) -> bool:
    tree = ast.parse(source, mode="eval")
    return any(isinstance(n, ast.Attribute) and dotted(n) in attributes for n in ast.walk(tree))


def _annotation(arg: ast.arg) -> str:
    return ast.unparse(arg.annotation) if arg.annotation is not None else ""
