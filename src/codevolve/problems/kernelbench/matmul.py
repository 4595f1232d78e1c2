"""The matrix product pattern: two 2-D or 3-D tensors, possibly transposed, possibly triangular.

``A @ B``, ``torch.matmul``, ``torch.mm`` or ``torch.bmm`` of two forward parameters, each maybe
transposed (``A.T``, ``A.mT``, ``A.t()``, ``A.transpose(...)``), a batch of matrices times one
matrix included, optionally under ``torch.triu``/``torch.tril`` with the main diagonal
(KernelBench Level-1 problems 1-4, 6-10, 13-18). :func:`product_operands` reads the product; the
pure-torch rewrites use it too.

Not recognised: 4-D einsum products (11), ``torch.diag(a) @ B`` (12, a rewrite instead), a
triangle off the main diagonal, an operand that is itself computed.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from codevolve.problems.kernelbench.calls import canonical_call


@dataclass(frozen=True, slots=True)
class Matmul:
    a: str  # Python source of each operand (a parameter, maybe transposed)
    b: str
    triangle: str = ""  # "", "upper" or "lower"


def match_matmul(expr: ast.expr, tensors: Sequence[str], modules: dict[str, str]) -> Matmul | None:
    del modules
    triangle = ""
    call = canonical_call(expr)
    if call is not None and call.name in ("triu", "tril") and len(call.args) == 1:
        if call.keywords and ast.unparse(call.keywords.get("diagonal", ast.Constant(0))) != "0":
            return None
        triangle, expr = ("upper" if call.name == "triu" else "lower"), call.args[0]
    operands = product_operands(expr)
    if operands is None:
        return None
    a, b = (_operand(o, tensors) for o in operands)
    return Matmul(a, b, triangle) if a and b else None


def product_operands(expr: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    """The two operands of ``A @ B``, ``torch.matmul``, ``torch.mm`` or ``torch.bmm``, or None."""
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
