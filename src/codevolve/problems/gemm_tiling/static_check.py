"""Check every literal ``GemmConfig(...)`` a candidate could return, without running it.

The train shapes reach only some branches of ``choose_config``; a branch for an M no train shape
has (``if M == 3: return GemmConfig(256, 256, 128, 4, 5, 8)``) would slip through scoring and fail
at launch time in production. So the source is parsed with :mod:`ast` (never executed) and every
``GemmConfig`` call anywhere in the module (helpers and tables included, since any of them may be
returned) is checked: each literal argument must be in its value set, and a call whose six
arguments are all literal must be launchable. Non-literal arguments are allowed; the sandboxed
probe on unseen shapes covers what they compute.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from codevolve.problems.gemm_tiling.space import FIELDS, VALUE_SETS, validate

ENTRY_POINT = "choose_config"
CONFIG_TYPE = "GemmConfig"


@dataclass(frozen=True, slots=True)
class StaticIssue:
    """One problem found in the source, with its 1-based line number (0 when it has none)."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


def check_source(source: str) -> tuple[StaticIssue, ...]:
    """All issues of a candidate's source; empty when it passes."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return (StaticIssue(error.lineno or 0, f"syntax error: {error.msg}"),)
    issues: list[StaticIssue] = []
    if not any(
        isinstance(node, ast.FunctionDef) and node.name == ENTRY_POINT for node in tree.body
    ):
        issues.append(StaticIssue(0, f"no top-level function {ENTRY_POINT}()"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_config_call(node):
            issues.extend(_check_call(node))
    return tuple(issues)


def _is_config_call(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == CONFIG_TYPE
    return isinstance(func, ast.Attribute) and func.attr == CONFIG_TYPE


def _check_call(call: ast.Call) -> list[StaticIssue]:
    """Issues of one call: literal values outside their sets, or six literals that cannot launch."""
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(
        keyword.arg is None for keyword in call.keywords
    ):
        return []  # *args or **kwargs: only the probe can tell
    arguments, issues = _arguments_by_field(call)
    literals: dict[str, object] = {}
    for field, allowed in zip(FIELDS, VALUE_SETS, strict=True):
        node = arguments.get(field)
        if node is None or not _is_literal(node):
            continue
        literals[field] = value = ast.literal_eval(node)
        if type(value) is not int or value not in allowed:
            issues.append(StaticIssue(call.lineno, f"{field}={value!r} is not one of {allowed}"))
    if issues or len(literals) < len(FIELDS):
        return issues
    config = validate([literals[field] for field in FIELDS])
    problem = config if isinstance(config, str) else config.launch_problem()
    if problem is None:
        return []
    return [StaticIssue(call.lineno, f"{ast.unparse(call)} cannot launch: {problem}")]


def _arguments_by_field(call: ast.Call) -> tuple[dict[str, ast.expr], list[StaticIssue]]:
    """The call's argument expressions keyed by field name, and misuse of the signature."""
    arguments = dict(zip(FIELDS, call.args, strict=False))
    issues = []
    if len(call.args) > len(FIELDS):
        issues.append(StaticIssue(call.lineno, f"{CONFIG_TYPE}() takes 6 values"))
    for keyword in call.keywords:
        if keyword.arg in FIELDS:
            arguments[keyword.arg] = keyword.value
        else:
            issues.append(StaticIssue(call.lineno, f"{CONFIG_TYPE}() has no field {keyword.arg}"))
    return arguments, issues


def _is_literal(node: ast.expr) -> bool:
    """A constant, or a sign applied to a number (``-1`` parses as a unary minus)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = node.operand
        return isinstance(operand, ast.Constant) and isinstance(
            operand.value, int | float | complex
        )
    return isinstance(node, ast.Constant)
