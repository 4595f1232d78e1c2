"""What a Python file of a problem folder refers to, found by parsing it (never by importing it).

Two kinds of reference decide which files a bundle carries (see ``selection.py``):

- **modules**: ``import a.b``, ``from a import b``, ``from . import b``, and string literals that
  are dotted names (``importlib.import_module("helpers")``), as absolute dotted names;
- **paths**: string literals, and literals joined into one path by ``/`` on ``Path`` objects,
  ``os.path.join``, ``Path(...)`` or ``joinpath``: ``open("data/x.json")``,
  ``Path(__file__).parent / "data" / "x.npy"``. Where a join or an f-string goes on with a value
  known only at run time (``os.path.join(here, "data", name)``, ``f"data/case_{i}.npy"``), the
  literal part before it is kept as a *folder* reference (``data``).

What an ``if __name__ == "__main__":`` block names is not a reference: the sandbox never runs
the file as a script. A literal that merely looks like a path costs nothing: only those naming a
file or folder that exists in the problem folder select anything.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

MAX_LITERAL_CHARS = 255  # longer strings are text, not paths
JOINS = frozenset({"join", "joinpath", "Path", "PurePath", "PurePosixPath", "PosixPath"})
DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


@dataclass(slots=True)
class References:
    """What one file refers to; folder references are prefixes of paths built at run time."""

    modules: set[str] = field(default_factory=set)
    paths: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)


def references(tree: ast.Module, *, package: str) -> References:
    """The references of a parsed file; ``package`` is its package's dotted name ('' at the top),
    against which relative imports resolve."""
    finder = _Finder(package)
    finder.visit(tree)
    return finder.found


class _Finder(ast.NodeVisitor):
    def __init__(self, package: str) -> None:
        self.found = References()
        self._package = package.split(".") if package else []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            parts = alias.name.split(".")
            self.found.modules.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            if node.level - 1 > len(self._package):
                return  # beyond the top of the folder: nothing here to bundle
            base = self._package[: len(self._package) - (node.level - 1)]
        else:
            base = []
        module = [*base, *(node.module.split(".") if node.module else [])]
        for end in range(1, len(module) + 1):
            self.found.modules.add(".".join(module[:end]))
        for alias in node.names:
            if alias.name != "*":  # ``from pkg import name``: name may be a submodule
                self.found.modules.add(".".join([*module, alias.name]))

    def visit_If(self, node: ast.If) -> None:
        if _is_main_guard(node.test):  # never run in the sandbox: what it names is not needed
            for statement in node.orelse:
                self.visit(statement)
        else:
            self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._literal(node.value)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        self._prefix(_leading_text(node))
        for value in node.values:  # its literal pieces are fragments, not paths
            if isinstance(value, ast.FormattedValue):
                self.visit(value.value)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Div):
            self._joined(_flatten(node))
        elif isinstance(node.op, ast.Add) and isinstance(node.left, ast.Constant):
            if isinstance(node.left.value, str):  # "data/" + name
                self._prefix(node.left.value)
            self.visit(node.right)
        else:
            self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_join(node):
            # The callee holds no literal but a receiver that _flatten takes in (joinpath).
            self._joined(_flatten(node))
            for keyword in node.keywords:
                self.visit(keyword.value)
        else:
            self.generic_visit(node)

    def _joined(self, parts: list[ast.expr]) -> None:
        """Runs of literal parts become one path each; a run followed by a run-time value is a
        folder reference. Other parts are visited as usual."""
        run: list[str] = []
        for part in parts:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                run.append(part.value)
                continue
            if isinstance(part, ast.JoinedStr):
                run.append(_leading_text(part))
                self._prefix("/".join(run))
            elif run:
                self.found.folders.add("/".join(run))
            run = []
            self.visit(part)
        if run:
            self._literal("/".join(run))

    def _literal(self, text: str) -> None:
        if not text or len(text) > MAX_LITERAL_CHARS or any(c in text for c in "\n\r\x00"):
            return
        self.found.paths.add(text)
        if DOTTED_NAME.fullmatch(text):
            self.found.modules.add(text)

    def _prefix(self, text: str) -> None:
        folder = text.rpartition("/")[0]
        if folder and len(folder) <= MAX_LITERAL_CHARS:
            self.found.folders.add(folder)


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"``, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    texts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return isinstance(test.ops[0], ast.Eq) and names == ["__name__"] and texts == ["__main__"]


def _callee(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    if isinstance(node.func, ast.Name):
        return node.func.id
    return None


def _is_join(node: ast.Call) -> bool:
    """``os.path.join(...)``, ``Path(...)``, ``p.joinpath(...)``; not ``", ".join(...)``."""
    return _callee(node) in JOINS and not isinstance(_receiver(node), ast.Constant)


def _receiver(node: ast.Call) -> ast.expr | None:
    return node.func.value if isinstance(node.func, ast.Attribute) else None


def _flatten(node: ast.expr) -> list[ast.expr]:
    """The parts of ``a / b / c``, ``join(a, b, c)`` and ``Path(a, b) / c``, left to right."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return [*_flatten(node.left), *_flatten(node.right)]
    if isinstance(node, ast.Call) and _is_join(node):
        receiver = _receiver(node)
        # ``Path(x).joinpath(a)`` continues ``Path(x)``; ``os.path.join`` has no path receiver.
        head = _flatten(receiver) if _callee(node) == "joinpath" and receiver is not None else []
        return [*head, *node.args]
    return [node]


def _leading_text(node: ast.JoinedStr) -> str:
    first = node.values[0] if node.values else None
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return ""
