"""Which launch a kernel program takes per shape, read from its source (never run).

A stored timing is reused for a child only where reading the child proves that, for that shape,
it runs the very launch that was timed: the same kernel code with the same launch parameters
(docs/launch-store.md). The proof is by reading with ``ast``; where it cannot be made, the child
is measured. It holds for programs of this form:

- module-level statements are imports, functions, and names bound to literals (no classes, no
  other statements, no ``global`` or ``nonlocal`` anywhere); no name is bound twice;
- ``matmul(x, w, y, workspace, num_sms)`` binds ``M, K = x.shape`` and ``N = w.shape[0]``, then
  holds rules ``if <test>: return <launch>`` and ends in ``return <launch>``;
- a test is integer arithmetic and comparisons of ``M``, ``N``, ``K`` and int literals;
- a launch calls a module-level function with names of ``matmul``'s parameters, int literals,
  and at most one config call ``f(M, N, K)`` whose function is itself only rules
  ``if <test>: return C(<ints>)`` ending in ``return C(<ints>)`` (``choose_config``).

The kernel hash of a launch covers the source of the launcher and of every module-level
definition it reaches by name, transitively (kernels, helpers, imports, ``C``), normalised by
``ast.unparse`` (comments and layout do not count). Two programs whose launch for a shape has the
same hash and the same parameter text run the same code on it.
"""

from __future__ import annotations

import ast
import hashlib
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from codevolve.core.launch_store import LaunchKey
from codevolve.problems.gemm_kernel_gpu.kernel_source import ENTRY_POINT

Shape = tuple[int, int, int]  # (M, N, K)
PARAMS = ("x", "w", "y", "workspace", "num_sms")
SHAPE_BINDINGS = frozenset({"M, K = x.shape", "N = w.shape[0]"})
_BINARY: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE: dict[type[ast.cmpop], Callable[[int, int], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


class Unproven(Exception):
    """The source is outside the form whose launches can be read (the program is measured)."""


@dataclass(frozen=True, slots=True)
class _Launch:
    """A ``return <launch>`` of matmul: the launcher and its arguments, one config call at most."""

    launcher: str
    args: tuple[ast.expr, ...]


def case_key(shape: Shape) -> str:
    m, n, k = shape
    return f"M={m} N={n} K={k}"


def launch_keys(source: str, shapes: Iterable[Shape]) -> dict[Shape, LaunchKey] | None:
    """Per shape, the launch the program takes; None where the program is outside the form."""
    try:
        return _Reader(ast.parse(source)).keys(shapes)
    except (Unproven, SyntaxError, ValueError, RecursionError):
        return None


class _Reader:
    def __init__(self, tree: ast.Module) -> None:
        self.defs = _module_definitions(tree)
        entry = self.defs.get(ENTRY_POINT)
        if not isinstance(entry, ast.FunctionDef):
            raise Unproven("no matmul")
        self.rules, self.default = _dispatch(entry, PARAMS)
        self.hashes: dict[str, str] = {}
        # per config function: its rules and default, read once (not once per shape)
        self.configs: dict[str, tuple[list[tuple[ast.expr, _Launch]], _Launch]] = {}

    def keys(self, shapes: Iterable[Shape]) -> dict[Shape, LaunchKey]:
        return {shape: self.key(shape) for shape in shapes}

    def key(self, shape: Shape) -> LaunchKey:
        names = dict(zip("MNK", shape, strict=True))
        launch = next((lw for test, lw in self.rules if _truth(test, names)), self.default)
        roots = [launch.launcher]
        shown = []
        for arg in launch.args:
            if isinstance(arg, ast.Call):  # the config call f(M, N, K)
                constructor, ints = self._config(arg, names)
                roots.append(constructor)
                shown.append(f"{constructor}({', '.join(map(str, ints))})")
            else:
                shown.append(ast.unparse(arg))
        return LaunchKey(
            kernel_hash=self._hash(tuple(roots)),
            launch=f"{launch.launcher}({', '.join(shown)})",
            case=case_key(shape),
        )

    def _config(self, call: ast.Call, names: Mapping[str, int]) -> tuple[str, tuple[int, ...]]:
        assert isinstance(call.func, ast.Name)
        function = self.defs.get(call.func.id)
        if not isinstance(function, ast.FunctionDef):
            raise Unproven("the config function is not a module-level function")
        if function.name not in self.configs:
            self.configs[function.name] = _dispatch(function, ("M", "N", "K"), bindings=frozenset())
        rules, default = self.configs[function.name]
        chosen = next((lw for test, lw in rules if _truth(test, names)), default)
        ints = [
            a.value for a in chosen.args if isinstance(a, ast.Constant) and type(a.value) is int
        ]
        if len(ints) != len(chosen.args):
            raise Unproven("a config is not all int literals")
        return chosen.launcher, tuple(int(v) for v in ints)

    def _hash(self, roots: tuple[str, ...]) -> str:
        joined = ",".join(roots)
        if joined not in self.hashes:
            reached = _closure(roots, self.defs)
            text = "\n\n".join(ast.unparse(self.defs[name]) for name in sorted(reached))
            self.hashes[joined] = hashlib.sha256(text.encode()).hexdigest()
        return self.hashes[joined]


def _module_definitions(tree: ast.Module) -> dict[str, ast.stmt]:
    """Each module-level name and the one statement that binds it."""
    if any(isinstance(node, ast.Global | ast.Nonlocal) for node in ast.walk(tree)):
        raise Unproven("global or nonlocal")
    defs: dict[str, ast.stmt] = {}
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.Expr) and index == 0 and isinstance(node.value, ast.Constant):
            continue  # the docstring
        for name in _bound(node):
            if name in defs:
                raise Unproven(f"{name} is bound twice")
            defs[name] = node
    return defs


def _bound(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef):
        return [node.name]
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
        if not _immutable(ast.literal_eval(node.value)):  # ValueError unless a literal
            raise Unproven("a module-level name bound to a mutable value")
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    raise Unproven(f"a module-level {type(node).__name__}")


def _immutable(value: object) -> bool:
    if isinstance(value, tuple):
        return all(_immutable(item) for item in value)
    return value is None or isinstance(value, int | float | complex | str | bytes)


def _closure(roots: Iterable[str], defs: Mapping[str, ast.stmt]) -> set[str]:
    """The module-level names reached from ``roots`` through the names their statements use."""
    reached: set[str] = set()
    todo = [name for name in roots if name in defs]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        used = {n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name)}
        todo += [other for other in used if other in defs and other not in reached]
    return reached


def _dispatch(
    function: ast.FunctionDef,
    params: tuple[str, ...],
    *,
    bindings: frozenset[str] = SHAPE_BINDINGS,
) -> tuple[list[tuple[ast.expr, _Launch]], _Launch]:
    """The rules and the final launch of a dispatch function of the readable form."""
    arguments = function.args
    if (
        function.decorator_list
        or [a.arg for a in arguments.args] != list(params)
        or arguments.posonlyargs
        or arguments.vararg
        or arguments.kwonlyargs
        or arguments.kwarg
        or arguments.defaults
    ):
        raise Unproven(f"{function.name} has another signature")
    body = list(function.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    seen = {ast.unparse(s) for s in body[: len(bindings)]}
    if seen != bindings:
        raise Unproven(f"{function.name} binds other names")
    body = body[len(bindings) :]
    if not body or not isinstance(body[-1], ast.Return):
        raise Unproven(f"{function.name} does not end in a return")
    rules = []
    for statement in body[:-1]:
        if not (
            isinstance(statement, ast.If)
            and not statement.orelse
            and len(statement.body) == 1
            and isinstance(statement.body[0], ast.Return)
        ):
            raise Unproven(f"{function.name} holds a statement other than a rule")
        _check_test(statement.test)
        rules.append((statement.test, _launch(statement.body[0], params)))
    return rules, _launch(body[-1], params)


def _launch(statement: ast.Return, params: tuple[str, ...]) -> _Launch:
    call = statement.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.keywords):
        raise Unproven("a return that is not a call of a named function")
    configs = 0
    for arg in call.args:
        if isinstance(arg, ast.Call):
            configs += 1
            shape_names = [a.id for a in arg.args if isinstance(a, ast.Name)]
            if not isinstance(arg.func, ast.Name) or arg.keywords or shape_names != ["M", "N", "K"]:
                raise Unproven("a launch argument calls other than f(M, N, K)")
            if len(arg.args) != 3:
                raise Unproven("a config call takes M, N, K")
        elif isinstance(arg, ast.Name):
            if arg.id not in (*params, "M", "N", "K"):
                raise Unproven(f"a launch argument names {arg.id}")
        elif not (isinstance(arg, ast.Constant) and type(arg.value) is int):
            raise Unproven("a launch argument that is not a name or an int")
    if configs > 1:
        raise Unproven("two config calls in one launch")
    return _Launch(call.func.id, tuple(call.args))


def _check_test(node: ast.expr) -> None:
    """A test of the readable form (its value is computed per shape by :func:`_value`)."""
    allowed = (ast.BoolOp, ast.boolop, ast.UnaryOp, ast.Not, ast.USub, ast.Compare, ast.BinOp)
    for part in ast.walk(node):
        if isinstance(part, ast.Name):
            if part.id not in ("M", "N", "K"):
                raise Unproven(f"a test names {part.id}")
        elif isinstance(part, ast.Constant):
            if type(part.value) not in (int, bool):
                raise Unproven("a test holds a literal that is not an int")
        elif isinstance(part, ast.operator):
            if type(part) not in _BINARY:
                raise Unproven(f"a test uses {type(part).__name__}")
        elif isinstance(part, ast.cmpop):
            if type(part) not in _COMPARE:
                raise Unproven(f"a test uses {type(part).__name__}")
        elif not isinstance(part, (*allowed, ast.Load)):
            raise Unproven(f"a test holds a {type(part).__name__}")


def _truth(test: ast.expr, names: Mapping[str, int]) -> bool:
    return bool(_value(test, names))


def _value(node: ast.expr, names: Mapping[str, int]) -> int:
    """Python's value of a checked test (``and``/``or`` return an operand, as Python's do)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, bool):
        return int(node.value)  # type: ignore[arg-type]  # an int or a bool, checked
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.BoolOp):
        value = 0
        for operand in node.values:
            value = _value(operand, names)
            if bool(value) != isinstance(node.op, ast.And):
                return value
        return value
    if isinstance(node, ast.UnaryOp):
        inner = _value(node.operand, names)
        return int(not inner) if isinstance(node.op, ast.Not) else -inner
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, names), _value(node.right, names)
        if right == 0 and isinstance(node.op, ast.FloorDiv | ast.Mod):
            raise Unproven("a test divides by zero")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        left = _value(node.left, names)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _value(comparator, names)
            if not _COMPARE[type(op)](left, right):
                return 0
            left = right
        return 1
    raise Unproven(f"a test holds a {type(node).__name__}")
