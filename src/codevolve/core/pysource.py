"""Parsing Python source from several threads at once.

CPython 3.11 keeps the recursion depth of its AST conversion in interpreter-wide state, so two
threads in ``ast.parse`` at the same moment can fail with "SystemError: AST constructor recursion
depth mismatch" (seen here: a worker thread's static check racing the controller's check of a
child). Every parse in the project goes through the one lock below; parses take microseconds.
"""

from __future__ import annotations

import ast
import threading
from typing import Literal, overload

_LOCK = threading.Lock()


@overload
def parse_python(
    source: str, mode: Literal["exec"] = "exec", *, filename: str = "<unknown>"
) -> ast.Module: ...
@overload
def parse_python(
    source: str, mode: Literal["eval"], *, filename: str = "<unknown>"
) -> ast.Expression: ...


def parse_python(
    source: str, mode: Literal["exec", "eval"] = "exec", *, filename: str = "<unknown>"
) -> ast.Module | ast.Expression:
    """``ast.parse``, serialised; raises SyntaxError (or ValueError on NUL bytes) like it."""
    with _LOCK:
        tree = ast.parse(source, filename=filename, mode=mode)
    assert isinstance(tree, ast.Module | ast.Expression)  # what these two modes produce
    return tree
