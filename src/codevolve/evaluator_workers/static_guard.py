"""A static check every program passes before any problem's cascade: hands off the evaluator.

A candidate is judged by trusted code in another process, so importing this project (to call its
scorer, read its reference tables or forge a result) or walking up the interpreter's frames to the
code that called it gains nothing at run time. It is still a sign of a search gaming its evaluator,
and the reason should reach the proposer and the dashboard as such, not as an obscure crash: such a
program is failed here, before it runs, with the line and the reason.

The check reads the source with :mod:`ast` (never runs it), so it catches what is written plainly;
what is computed (``__import__("code" + "volve")``) is left to the sandbox, which holds nothing of
the worker. Docstrings and comments may mention anything.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from codevolve.core.pysource import parse_python

STAGE_NAME = "guard"  # the name of the result a rejected program gets
# Top-level packages of this project; a candidate imports none of them.
PROJECT_PACKAGES = frozenset({"codevolve"})
# Attributes that lead from a function to its caller's frame, or to every object of the process.
INTROSPECTION = frozenset(
    {
        "_getframe",
        "_current_frames",
        "currentframe",
        "f_back",
        "f_globals",
        "f_locals",
        "tb_frame",
        "gi_frame",
        "cr_frame",
        "ag_frame",
        "get_objects",
        "get_referrers",
        "get_referents",
    }
)
_MODULE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True, slots=True)
class GuardIssue:
    """Why a program is refused, with its 1-based line."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


def check_program(source: str) -> tuple[GuardIssue, ...]:
    """Every reason to refuse ``source``; empty when it may run. A syntax error is not an issue
    here: the sandbox reports it as a load error with the interpreter's own message."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):  # ValueError: a null byte
        return ()
    docstrings = _docstring_nodes(tree)
    issues: list[GuardIssue] = []
    for node in ast.walk(tree):
        reason = _reason(node, docstrings)
        if reason is not None:
            issues.append(GuardIssue(getattr(node, "lineno", 0), reason))
    return tuple(issues)


def _reason(node: ast.AST, docstrings: set[int]) -> str | None:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        project = [name for name in names if _is_project_module(name)]
        return f"imports the project's own package {project[0]!r}" if project else None
    if isinstance(node, ast.ImportFrom):
        if node.level == 0 and node.module is not None and _is_project_module(node.module):
            return f"imports from the project's own package {node.module!r}"
        return None
    if isinstance(node, ast.Attribute) and node.attr in INTROSPECTION:
        return f"reaches into the interpreter's frames or objects ({node.attr})"
    if isinstance(node, ast.Name) and node.id in INTROSPECTION:
        return f"reaches into the interpreter's frames or objects ({node.id})"
    if isinstance(node, ast.Constant) and id(node) not in docstrings:
        text = node.value
        if isinstance(text, str) and _MODULE_PATH.fullmatch(text) and _is_project_module(text):
            return f"names the project's own module {text!r}"
    return None


def _is_project_module(name: str) -> bool:
    return name.split(".", 1)[0] in PROJECT_PACKAGES


def _docstring_nodes(tree: ast.Module) -> set[int]:
    """ids of the string constants that are docstrings (of the module, classes, functions)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found
