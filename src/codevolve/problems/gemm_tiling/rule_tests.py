"""The tests of ``choose_config``'s rules, read without running them.

A rule's test compares M, N, K, number literals and arithmetic of them, joined by and, or, not.
This module says which tests are understood, which shapes an understood test takes, and where its
thresholds (int literals compared with a dimension or a product of dimensions) lie.
"""

from __future__ import annotations

import ast
import itertools
import operator
from collections.abc import Callable
from typing import Any, TypeGuard

Shape = tuple[int, int, int]  # (M, N, K)
_COMPARISONS: dict[type[ast.cmpop], Callable[[float, float], bool]] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}  # fmt: skip
_ARITHMETIC: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}  # fmt: skip


def int_literal(node: ast.expr) -> int | None:
    """The value of an int literal (not a bool), or None for any other node."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return int(node.value)
    return None


def understood(test: ast.expr) -> bool:
    """Comparisons of M, N, K, number literals and arithmetic of them (``M * N``, ``M / N``,
    ``K // 2``: what the generic mutations make of a test), joined by and, or, not. A rule whose
    test is understood is read, so the mutations know which shapes it takes; any other ``if``
    is left alone and seen as taking none."""
    if isinstance(test, ast.BoolOp):
        return all(understood(v) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return understood(test.operand)
    if isinstance(test, ast.Compare):
        operands = (test.left, *test.comparators)
        return all(type(op) in _COMPARISONS for op in test.ops) and all(map(_is_term, operands))
    return False


def _number(node: ast.expr) -> int | float | None:
    value = node.value if isinstance(node, ast.Constant) else None
    return value if type(value) is int or type(value) is float else None


def _is_term(node: ast.expr) -> bool:
    """A dimension, a number literal, or + - * / // % of such terms."""
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _is_term(node.left) and _is_term(node.right)
    return _is_dim(node) or _number(node) is not None


def _is_product(node: ast.expr) -> TypeGuard[ast.BinOp]:
    """A product of dimensions, such as ``M * N``."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
        return False
    return all(_is_dim(side) or _is_product(side) for side in (node.left, node.right))


def holds(test: ast.expr, shape: Shape) -> bool:
    """Whether the shape meets an understood test (the program itself never runs here)."""
    if isinstance(test, ast.BoolOp):
        results = (holds(v, shape) for v in test.values)
        return all(results) if isinstance(test.op, ast.And) else any(results)
    if isinstance(test, ast.UnaryOp):
        return not holds(test.operand, shape)
    if not isinstance(test, ast.Compare):
        return False
    values = [_operand(o, shape) for o in (test.left, *test.comparators)]
    pairs = zip(test.ops, values, values[1:], strict=False)
    return all(
        a is not None and b is not None and _COMPARISONS[type(op)](a, b) for op, a, b in pairs
    )


def _operand(node: ast.expr, shape: Shape) -> int | float | None:
    """The term's value for the shape, as Python computes it; None where it cannot (a division
    by zero: the program itself fails there)."""
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _operand(node.left, shape), _operand(node.right, shape)
        if left is None or right is None:
            return None
        try:
            return _ARITHMETIC[type(node.op)](left, right)  # type: ignore[no-any-return]
        except ZeroDivisionError:
            return None
    return shape["MNK".index(node.id)] if _is_dim(node) else _number(node)


def _is_dim(node: ast.expr) -> TypeGuard[ast.Name]:
    return isinstance(node, ast.Name) and node.id in ("M", "N", "K")


def thresholds(test: ast.expr) -> list[tuple[ast.expr, int, str]]:
    """Each int literal compared with M, N, K or a product of them: the node, its value and what
    it is compared with (``"M"``, ``"N"``, ``"K"`` or the product's text)."""
    sites = []
    for node in ast.walk(test):
        operands = [node.left, *node.comparators] if isinstance(node, ast.Compare) else []
        for a, b in itertools.pairwise(operands):
            for name, literal in ((a, b), (b, a)):
                value = int_literal(literal)
                if value is not None and (_is_dim(name) or _is_product(name)):
                    sites.append((literal, value, ast.unparse(name)))
    return sites
