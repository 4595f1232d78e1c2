"""Prove, from the source alone, that ``choose_config`` can only answer its literal configs.

:func:`~codevolve.problems.gemm_tiling.static_check.check_source` judges every literal config in
a program; a config computed at run time it cannot see, so the static stage sweeps the program
over every token count it serves (:mod:`.sweep`). That sweep is redundant for a program whose
every answer is one of its literals, and such programs are most of a search's: the initial
program and every rule the simulated proposer writes have this form. :func:`only_literal_answers`
recognises it, conservatively: anything outside the form below is left to the sweep.

- The module holds docstrings, ``from __future__ import annotations``, ``from typing import
  NamedTuple``, ``class GemmConfig(NamedTuple)`` with the six fields as bare ``int``
  annotations, and ``def choose_config(M, N, K)`` (three plain parameters, no decorator, names
  or strings as annotations), each once, and nothing else.
- The function's body is ``if`` statements, ``pass``, docstrings and ``return`` of a literal
  config (``GemmConfig`` of six int literals, a tuple or list of six int literals, or ``a if
  test else b`` of those), and ends with such a return.
- Tests use the parameters, int and float literals, ``+ - *``, ``/ // %`` by a nonzero literal
  or by a parameter, the comparisons ``< <= > >= == !=``, ``and or not``, and no int in them
  can exceed 2**1000 for parameters below 2**31.

Such a function holds no state, calls nothing and cannot loop, so it answers the same for the same
shape; on positive int arguments below 2**31 (every token count and matrix size) no test can
raise: no division by zero, no int too large for a float. Every path ends in a literal, and
``GemmConfig`` can only be the module's own named tuple. So its answers are exactly the literals
that ``check_source`` judged.
"""

from __future__ import annotations

import ast

from codevolve.core.pysource import parse_python
from codevolve.problems.gemm_tiling.space import FIELDS

ENTRY_POINT = "choose_config"
CONFIG_TYPE = "GemmConfig"
PARAMETER_BITS = 31  # parameters are positive ints below 2**31: token counts and matrix sizes
MAX_INT_BITS = 1000  # an int below 2**1000 converts to a float and divides without overflow
ALLOWED_IMPORTS = {("typing", "NamedTuple"), ("__future__", "annotations")}
ARITHMETIC = (ast.Add, ast.Sub, ast.Mult)
DIVISION = (ast.Div, ast.FloorDiv, ast.Mod)
COMPARISONS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)

Bits = int  # an upper bound of an int's bit length; FLOAT for a float
FLOAT = -1


def only_literal_answers(source: str) -> bool:
    """Whether every answer ``choose_config`` can give is one of its literal configs (see the
    module's docstring for the form that proves it); False when unsure."""
    try:
        tree = parse_python(source)
        return _module_has_the_form(tree)
    except (SyntaxError, ValueError, RecursionError):  # unparsable, or nested past our stack
        return False


def _module_has_the_form(tree: ast.Module) -> bool:
    seen: list[str] = []
    for node in tree.body:
        if _is_docstring(node):
            continue
        if isinstance(node, ast.ImportFrom):
            names = {(node.module, alias.name) for alias in node.names if alias.asname is None}
            if node.level or len(names) != len(node.names) or not names <= ALLOWED_IMPORTS:
                return False
            seen.extend(f"import {name}" for _, name in names)
        elif isinstance(node, ast.ClassDef) and _is_config_class(node):
            seen.append(CONFIG_TYPE)
        elif isinstance(node, ast.FunctionDef) and _is_literal_function(node):
            seen.append(ENTRY_POINT)
        else:
            return False
    return len(seen) == len(set(seen)) and {CONFIG_TYPE, ENTRY_POINT} <= set(seen)


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _is_config_class(node: ast.ClassDef) -> bool:
    """``class GemmConfig(NamedTuple)``: the six fields as bare ``int`` annotations, in order."""
    fields = [statement for statement in node.body if not _is_docstring(statement)]
    return (
        node.name == CONFIG_TYPE
        and not node.decorator_list
        and not node.keywords
        and len(node.bases) == 1
        and isinstance(node.bases[0], ast.Name)
        and node.bases[0].id == "NamedTuple"
        and len(fields) == len(FIELDS)
        and all(
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and field.target.id == name
            and field.value is None
            and isinstance(field.annotation, ast.Name)
            and field.annotation.id == "int"
            for field, name in zip(fields, FIELDS, strict=True)
        )
    )


def _is_literal_function(node: ast.FunctionDef) -> bool:
    """``def choose_config(M, N, K)`` whose every path ends in a literal config."""
    arguments = node.args
    parameters = [*arguments.posonlyargs, *arguments.args]
    plain_signature = (
        len(parameters) == 3
        and arguments.vararg is None
        and arguments.kwarg is None
        and not arguments.kwonlyargs
        and not arguments.defaults
        and all(_is_plain_annotation(p.annotation) for p in parameters)
        and _is_plain_annotation(node.returns)
    )
    if node.name != ENTRY_POINT or node.decorator_list or not plain_signature:
        return False
    names = frozenset(p.arg for p in parameters)
    if CONFIG_TYPE in names:  # a parameter named GemmConfig would be what the returns call
        return False
    return isinstance(node.body[-1], ast.Return) and _are_rules(node.body, names)


def _is_plain_annotation(node: ast.expr | None) -> bool:
    """No annotation, a name or a string: evaluating it (without the future import) runs
    nothing and binds nothing."""
    return (
        node is None
        or isinstance(node, ast.Name)
        or (isinstance(node, ast.Constant) and isinstance(node.value, str))
    )


def _are_rules(body: list[ast.stmt], names: frozenset[str]) -> bool:
    for statement in body:
        if isinstance(statement, ast.If):
            if not (
                _test_bits(statement.test, names) is not None
                and _are_rules(statement.body, names)
                and _are_rules(statement.orelse, names)
            ):
                return False
        elif isinstance(statement, ast.Return):
            if statement.value is None or not _is_literal_answer(statement.value, names):
                return False
        elif not (isinstance(statement, ast.Pass) or _is_docstring(statement)):
            return False
    return True


def _is_literal_answer(node: ast.expr, names: frozenset[str]) -> bool:
    if isinstance(node, ast.IfExp):
        return (
            _test_bits(node.test, names) is not None
            and _is_literal_answer(node.body, names)
            and _is_literal_answer(node.orelse, names)
        )
    if isinstance(node, ast.Call):
        return (
            isinstance(node.func, ast.Name)
            and node.func.id == CONFIG_TYPE
            and not node.keywords
            and _six_int_literals(node.args)
        )
    return isinstance(node, ast.Tuple | ast.List) and _six_int_literals(node.elts)


def _six_int_literals(values: list[ast.expr]) -> bool:
    return len(values) == len(FIELDS) and all(
        isinstance(value, ast.Constant) and type(value.value) is int for value in values
    )


def _test_bits(node: ast.expr, names: frozenset[str]) -> Bits | None:
    """A bound of the bit length of ``node``'s value (FLOAT for a float), or None when the node
    is outside the form or its value could grow past MAX_INT_BITS."""
    bits = _bits(node, names)
    return None if bits is None or bits > MAX_INT_BITS else bits


def _bits(node: ast.expr, names: frozenset[str]) -> Bits | None:
    if isinstance(node, ast.Name):
        return PARAMETER_BITS if node.id in names else None
    if isinstance(node, ast.Constant):
        return _constant_bits(node.value)
    if isinstance(node, ast.UnaryOp):
        operand = _test_bits(node.operand, names)
        if operand is None or isinstance(node.op, ast.Invert):
            return None
        return 1 if isinstance(node.op, ast.Not) else operand
    if isinstance(node, ast.BoolOp):
        values = [_test_bits(value, names) for value in node.values]
        return None if None in values else max(values)  # type: ignore[type-var]
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        ops_ok = all(isinstance(op, COMPARISONS) for op in node.ops)
        return 1 if ops_ok and all(_test_bits(o, names) is not None for o in operands) else None
    if isinstance(node, ast.BinOp):
        return _binary_bits(node, names)
    return None


def _constant_bits(value: object) -> Bits | None:
    if type(value) is bool or type(value) is int:
        return int(value).bit_length()
    if type(value) is float:
        return FLOAT
    return None  # strings, bytes, None, complex: comparing or adding them to a number can raise


def _binary_bits(node: ast.BinOp, names: frozenset[str]) -> Bits | None:
    left, right = _test_bits(node.left, names), _test_bits(node.right, names)
    if left is None or right is None:
        return None
    if isinstance(node.op, DIVISION):
        if not _is_safe_divisor(node.right, names):
            return None
        if isinstance(node.op, ast.Div) or FLOAT in (left, right):
            return FLOAT
        return left if isinstance(node.op, ast.FloorDiv) else right  # |a % d| < |d|
    if not isinstance(node.op, ARITHMETIC):
        return None  # ** and shifts can build ints past any bound
    if FLOAT in (left, right):
        return FLOAT
    return left + right if isinstance(node.op, ast.Mult) else max(left, right) + 1


def _is_safe_divisor(node: ast.expr, names: frozenset[str]) -> bool:
    """A parameter (positive in every call) or a nonzero number literal."""
    if isinstance(node, ast.Name):
        return node.id in names
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value != 0
