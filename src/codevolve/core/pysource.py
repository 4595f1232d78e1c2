"""Parsing Python source from several threads at once.

CPython 3.11 keeps the recursion depth of its AST conversion in interpreter-wide state, so two
threads in ``ast.parse`` at the same moment can fail with "SystemError: AST constructor recursion
depth mismatch" (seen here: a worker thread's static check racing the controller's check of a
child). Every parse in the project goes through the one lock below; parses take microseconds.

A child is checked twice on its way in (by the proposer that made it, then by the applier), so
:func:`check_parses` remembers the sources that parsed recently and does not parse them again.
"""

from __future__ import annotations

import ast
import threading
from collections import OrderedDict
from typing import Literal, overload

PARSED_SOURCES = 256  # sources remembered as parsing; the least recently checked goes first

_LOCK = threading.Lock()
_PARSED: OrderedDict[str, None] = OrderedDict()  # guarded by _LOCK


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


def check_parses(source: str) -> None:
    """Raise as ``ast.parse`` would when ``source`` does not parse (SyntaxError, ValueError on
    NUL bytes, ...); a source that parsed recently is not parsed again."""
    with _LOCK:
        if source in _PARSED:
            _PARSED.move_to_end(source)
            return
    parse_python(source)
    with _LOCK:
        _PARSED[source] = None
        while len(_PARSED) > PARSED_SOURCES:
            _PARSED.popitem(last=False)
