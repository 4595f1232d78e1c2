"""The scan pattern: a cumulative sum or product along a dimension, reversed, exclusive or masked.

``torch.cumsum(x, dim)`` of one tensor (KernelBench Level-1 problem 89), reversed by flipping
before and after along the same dim (91), exclusive by the ``torch.cat((zeros, x), dim).narrow(
dim, 0, n)`` shift, masked by ``x * mask`` for a second tensor ``mask`` (93);
``torch.cumprod(x, dim)`` (90), reversed or masked the same way but never exclusive. KernelBench's
own exclusive cumsum (92) shifts with ``torch.cat((zeros, x), dim)[:-1]``: the ``[:-1]`` drops the
last index of dimension 0, not of ``dim``, so the reference returns one row fewer and one column
more than x; :func:`first_rows_shift` reads that form and the template computes exactly it (the
pure-torch rewrite of the exclusive cumsum does not take it).
:func:`cumsum_args` reads the call and :func:`exclusive_shift` the shift; the pure-torch
rewrites use both too.

Not recognised: a scan with ``dtype=``, an exclusive cumprod, a flip along another dim, a map
of x other than a mask product.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from codevolve.problems.kernelbench.calls import bind, canonical_call


@dataclass(frozen=True, slots=True)
class Scan:
    tensor: str
    dim: str
    reverse: bool = False
    exclusive: bool = False
    mask: str = ""  # a forward parameter multiplied in, or ""
    product: bool = False  # cumprod rather than cumsum
    drop_last_row: bool = False  # of cat((zeros, x), dim)[:-1]: x's rows but the last, shifted


def match_scan(expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]) -> Scan | None:
    del modules
    reverse = False
    call = canonical_call(expr)
    if call is not None and call.name == "flip" and len(call.args) == 2:
        reverse, flip_dim = True, ast.unparse(call.args[1])
        expr = call.args[0]
    product = False
    cumsum = cumsum_args(expr)
    if cumsum is None:
        cumsum, product = cumsum_args(expr, "cumprod"), True
    if cumsum is None:
        return None
    inner, dim = cumsum
    dim_source = ast.unparse(dim)
    if reverse:
        flipped = canonical_call(inner)
        if flipped is None or flipped.name != "flip" or len(flipped.args) != 2:
            return None
        if {ast.unparse(flipped.args[1]), flip_dim} != {dim_source}:
            return None
        inner = flipped.args[0]
    exclusive = None if product else exclusive_shift(inner, dim_source)
    if exclusive is not None:
        inner = exclusive
    shifted = None if product or exclusive is not None else first_rows_shift(inner, dim_source)
    if shifted is not None:
        inner = shifted
    mask = ""
    if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Mult):
        left, right = inner.left, inner.right
        if isinstance(right, ast.Name) and right.id in tensors:
            inner, mask = left, right.id
    if not (isinstance(inner, ast.Name) and inner.id in tensors):
        return None
    if shifted is not None and (reverse or mask):
        return None
    return Scan(
        inner.id, dim_source, reverse, exclusive is not None, mask, product, shifted is not None
    )


def cumsum_args(expr: ast.expr, name: str = "cumsum") -> tuple[ast.expr, ast.expr] | None:
    """The input and dim of ``torch.cumsum(input, dim)`` (or of the ``name`` scan, such as
    ``cumprod``; no ``dtype=``), or None."""
    call = canonical_call(expr)
    if call is None or call.name != name:
        return None
    bound = bind(call, ("input", "dim"), {"dtype": None})
    inner, dim = bound.get("input"), bound.get("dim")
    if not isinstance(inner, ast.expr) or not isinstance(dim, ast.expr) or bound.get("dtype"):
        return None
    return inner, dim


def first_rows_shift(expr: ast.expr, dim: str) -> ast.expr | None:
    """x of ``torch.cat((zeros_like(...), x), dim=D)[:-1]``: a leading zero along D, and the last
    index of dimension 0 dropped (as KernelBench's problem 92 writes it)."""
    if not (isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Slice)):
        return None
    cut = expr.slice
    if cut.lower is not None or cut.step is not None or cut.upper is None:
        return None
    if ast.unparse(cut.upper) != "-1":
        return None
    return _zero_then(expr.value, dim)


def _zero_then(expr: ast.expr, dim: str) -> ast.expr | None:
    """x of ``torch.cat((torch.zeros_like(x.select(D, 0).unsqueeze(D)), x), dim=D)``, or None."""
    cat = canonical_call(expr)
    if cat is None or cat.name not in ("cat", "concat", "concatenate") or len(cat.args) != 1:
        return None
    parts = cat.args[0]
    cat_dim = cat.keywords.get("dim")
    if not isinstance(parts, ast.Tuple | ast.List) or len(parts.elts) != 2:
        return None
    if cat_dim is None or ast.unparse(cat_dim) != dim:
        return None
    zeros, series = parts.elts
    # one slice of zeros shaped as x's first along D (any other shape shifts by something else)
    one_slice = f"zeros_like({ast.unparse(series)}.select({dim}, 0).unsqueeze({dim}))"
    if ast.unparse(zeros).removeprefix("torch.") != one_slice:
        return None
    return series


def exclusive_shift(expr: ast.expr, dim: str) -> ast.expr | None:
    """x of ``torch.cat((zeros_like(...), x), dim=D).narrow(D, 0, n)``: the series shifted by
    one with a leading zero, whose cumsum is the exclusive cumsum of x."""
    narrow = canonical_call(expr)
    if narrow is None or narrow.name != "narrow" or len(narrow.args) != 4:
        return None
    if ast.unparse(narrow.args[1]) != dim or ast.unparse(narrow.args[2]) != "0":
        return None
    return _zero_then(narrow.args[0], dim)
