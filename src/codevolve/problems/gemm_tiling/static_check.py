"""Check every literal ``GemmConfig(...)`` a candidate could return, without running it.

The train shapes reach only some branches of ``choose_config``; a branch for an M no train shape
has (``if M == 3: return GemmConfig(256, 256, 128, 4, 5, 8)``) would slip through scoring and fail
at launch time in production. So the source is parsed with :mod:`ast` (never executed) and every
``GemmConfig`` call anywhere in the module (helpers and tables included, since any of them may be
returned) is checked: each literal argument must be in its value set, and a call whose six
arguments are all literal must be launchable. Non-literal arguments are allowed; the sandboxed
probe on unseen shapes covers what they compute.

A candidate may also return a plain list or tuple of six ints (the sandbox turns a ``GemmConfig``
into one anyway), so the same check covers every six-element list or tuple literal that a
``return`` can yield (through conditional expressions and ``and``/``or`` too), and every such
literal inside a table (any container assigned to a name) that a ``return`` or a
``GemmConfig(*...)`` reads: ``return TABLE.get(M, (64, 128, 64, 4, 3, 8))`` and
``return GemmConfig(*PICKS[M])`` hide no unchecked branch.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from codevolve.core.pysource import parse_python
from codevolve.problems.gemm_tiling.shapes import GemmShape
from codevolve.problems.gemm_tiling.space import FIELDS, VALUE_SETS, GemmConfig, validate

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
        tree = parse_python(source)
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
    for sequence in _returnable_sequences(tree):
        arguments = dict(zip(FIELDS, sequence.elts, strict=True))
        issues.extend(_check_fields(arguments, line=sequence.lineno, shown=ast.unparse(sequence)))
    return tuple(issues)


def _returnable_sequences(tree: ast.Module) -> list[ast.Tuple | ast.List]:
    """Six-element list or tuple literals a return can yield, directly or from a table it reads."""
    found: dict[int, ast.Tuple | ast.List] = {}
    read: set[str] = set()  # names of tables that returns and GemmConfig(*...) read
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            for branch in _branches(node.value):
                if isinstance(branch, ast.Tuple | ast.List) and len(branch.elts) == len(FIELDS):
                    found[id(branch)] = branch
            read.update(name.id for name in ast.walk(node.value) if isinstance(name, ast.Name))
            for inner in ast.walk(node.value):  # TABLE.get(M, (..six..)): defaults count too
                if isinstance(inner, ast.Tuple | ast.List) and _six_ints(inner):
                    found[id(inner)] = inner
        elif isinstance(node, ast.Starred) and isinstance(node.value, ast.AST):
            read.update(name.id for name in ast.walk(node.value) if isinstance(name, ast.Name))
    for node in ast.walk(tree):
        targets = _assigned_names(node)
        value = getattr(node, "value", None)
        if targets & read and isinstance(value, ast.expr):
            for inner in ast.walk(value):
                if isinstance(inner, ast.Tuple | ast.List) and _six_ints(inner):
                    found[id(inner)] = inner
    return sorted(found.values(), key=lambda n: (n.lineno, n.col_offset))


def _branches(expr: ast.expr) -> list[ast.expr]:
    """The expressions ``expr`` may evaluate to: both arms of ``a if c else b``, each operand of
    ``and``/``or``, recursively."""
    if isinstance(expr, ast.IfExp):
        return [*_branches(expr.body), *_branches(expr.orelse)]
    if isinstance(expr, ast.BoolOp):
        return [branch for value in expr.values for branch in _branches(value)]
    return [expr]


def _six_ints(node: ast.Tuple | ast.List) -> bool:
    return len(node.elts) == len(FIELDS) and all(
        isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts
    )


def _assigned_names(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Assign):
        return {
            t.id for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)
        }
    if isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


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
    shown = ast.unparse(call)
    return issues + _check_fields(arguments, line=call.lineno, shown=shown, launch=not issues)


def _check_fields(
    arguments: dict[str, ast.expr], *, line: int, shown: str, launch: bool = True
) -> list[StaticIssue]:
    """Literal values outside their sets, or (``launch``) six literals that cannot launch."""
    issues: list[StaticIssue] = []
    literals: dict[str, object] = {}
    for field, allowed in zip(FIELDS, VALUE_SETS, strict=True):
        node = arguments.get(field)
        if node is None or not _is_literal(node):
            continue
        literals[field] = value = ast.literal_eval(node)
        if type(value) is not int or value not in allowed:
            issues.append(StaticIssue(line, f"{field}={value!r} is not one of {allowed}"))
    if issues or len(literals) < len(FIELDS) or not launch:
        return issues
    config = validate([literals[field] for field in FIELDS])
    problem = config if isinstance(config, str) else config.launch_problem()
    if problem is None:
        return []
    return [StaticIssue(line, f"{shown} cannot launch: {problem}")]


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


def judge_answer(value: object) -> GemmConfig | str:
    """An untrusted answer as a launchable config, or ``returned ...: why not`` (to follow the
    call that answered it)."""
    config = validate(value)
    if isinstance(config, str):
        return f"returned {_shortened(repr(value))}: {config}"
    problem = config.launch_problem()
    if problem is not None:
        return f"returned {config}, which cannot launch: {problem}"
    return config


def _shortened(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def impure_answers(shapes: Sequence[GemmShape], configs: Sequence[GemmConfig]) -> str | None:
    """Why the answers are not a function of the shape alone (one shape, two configs), or None.

    choose_config must be pure: a program that answers by how often, or in what order, it was
    asked (a counter, a cache of earlier answers, the size of the batch it is in) would be scored
    on answers that the same program does not give when it is deployed.
    """
    first: dict[GemmShape, GemmConfig] = {}
    for shape, config in zip(shapes, configs, strict=True):
        seen = first.setdefault(shape, config)
        if seen != config:
            return impurity(shape, seen, config)
    return None


def impurity(shape: GemmShape, first: GemmConfig, then: GemmConfig) -> str:
    """The error of a program that answered ``shape`` with ``first`` and later with ``then``."""
    return (
        f"{ENTRY_POINT}({shape.m}, {shape.n}, {shape.k}) answered {first} and then "
        f"{then}: it must be a pure function of (M, N, K)"
    )
