"""Reading a KernelBench ``ModelNew`` with ``ast`` (never run): its forward and its modules.

The forward's body is read as one expression: a docstring is skipped, ``name = expr`` statements
(annotated or not) are substituted into the ``return``. A body holding any other statement (an
``if``, a loop, a tuple target, an augmented assignment) has no such expression. ``__init__`` is
read only for its ``self.<attr> = <call>(...)`` assignments, which say what an attribute is (and,
for a loss module, with which arguments it was built).
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from codevolve.problems.kernelbench.calls import dotted


@dataclass(frozen=True, slots=True)
class Forward:
    """What a template needs of the parent's ``forward``: its signature and its inputs."""

    args_source: str  # the parameters as written, ``self`` included
    returns_source: str  # the return annotation, or ""
    inputs: tuple[str, ...]  # the parameter names after self, in order


def signature(forward: ast.FunctionDef) -> Forward | None:
    """``forward``'s signature, which a template's new forward repeats and passes on to the
    parent's; None where it has ``*args``, ``**kwargs``, keyword-only or positional-only
    parameters, or none after ``self``."""
    args = forward.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or not args.args:
        return None
    return Forward(
        args_source=ast.unparse(args),
        returns_source=ast.unparse(forward.returns) if forward.returns else "",
        inputs=tuple(a.arg for a in args.args[1:]),
    )


def model_class(tree: ast.Module) -> ast.ClassDef | None:
    return next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None
    )


def method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def body_statements(forward: ast.FunctionDef) -> list[ast.stmt]:
    """The body after the docstring."""
    body = forward.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1:]
    return body


def returned_expression(forward: ast.FunctionDef, *, single_use: bool = False) -> ast.expr | None:
    """The returned expression with the body's single-name assignments substituted, or None.

    With ``single_use``, None also when an assigned name is read more than once (substituting it
    would compute it twice)."""
    env: dict[str, ast.expr] = {}
    body = body_statements(forward)
    if single_use:
        reads = [n.id for s in body for n in ast.walk(s) if isinstance(n, ast.Name)]
        assigned = {
            t.id
            for s in body
            for t in ast.walk(s)
            if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
        }
        if any(reads.count(name) > 2 for name in assigned):  # the store itself is one
            return None
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        elif isinstance(stmt, ast.Return) and stmt.value is not None:
            return _substitute(stmt.value, env)
        else:
            return None
        if not isinstance(target, ast.Name):
            return None
        env[target.id] = _substitute(value, env)
    return None


class _Substitute(ast.NodeTransformer):
    def __init__(self, env: dict[str, ast.expr]) -> None:
        self.env = env

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return copy.deepcopy(self.env[node.id]) if node.id in self.env else node


def _substitute(expr: ast.expr, env: dict[str, ast.expr]) -> ast.expr:
    result = _Substitute(env).visit(copy.deepcopy(expr))
    assert isinstance(result, ast.expr)
    return result


def init_calls(cls: ast.ClassDef) -> dict[str, ast.Call]:
    """``self.<attr> = <call>(...)`` assignments of ``__init__``: attribute -> the call."""
    init = method(cls, "__init__")
    found: dict[str, ast.Call] = {}
    for node in ast.walk(init) if init is not None else []:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(target := node.targets[0], ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and isinstance(node.value, ast.Call)
        ):
            found[target.attr] = node.value
    return found


def callee(call: ast.Call) -> str:
    """The last dotted part of the function ``call`` calls: ``LayerNorm`` for
    ``nn.LayerNorm(...)``, ``Parameter``, ``float``, ``sqrt``: enough to tell a module or a tensor
    from a scalar."""
    return dotted(call.func).rsplit(".", 1)[-1]
