"""The names a Python module binds at its top level, and renaming some of them in its source.

An exported module holds two sources in one namespace (a KernelBench solution and the problem file
it is checked against). Where both bind a name, the later one would silently rebind what the
earlier one reads, so one side's name is renamed: every use of the name as a variable is
rewritten, and nothing else (attributes, keyword arguments in calls and strings keep their text),
so the code's formatting and comments stay the user's. Imports that bind a renamed name are
written again with ``as``.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Mapping

from codevolve.core.export import ExportRefused
from codevolve.core.pysource import parse_python

Position = tuple[int, int]  # (1-based line, 0-based column), as ast and tokenize count them
_SKIPPED = (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
_OWN_SCOPE = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def bound_names(statement: ast.stmt) -> set[str]:
    """Names a top-level statement binds in the module's namespace."""
    return _bound(statement)


def _bound(node: ast.AST) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}  # the body is the function's or class's own scope
    if isinstance(node, ast.Import):
        return {alias.asname or alias.name.split(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom):
        return {alias.asname or alias.name for alias in node.names if alias.name != "*"}
    if isinstance(node, _OWN_SCOPE):
        return set()
    names: set[str] = set()
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
        names.add(node.id)
    if isinstance(node, ast.ExceptHandler) and node.name:
        names.add(node.name)
    for child in ast.iter_child_nodes(node):
        names |= _bound(child)
    return names


def module_names(source: str | ast.Module) -> set[str]:
    """Every name ``source`` (or its parsed tree) binds at its top level."""
    tree = parse_python(source) if isinstance(source, str) else source
    return {name for statement in tree.body for name in bound_names(statement)}


def rename(source: str, renames: Mapping[str, str]) -> str:
    """``source`` with each name of ``renames`` (a module-level name) replaced by its new name.

    Raises :class:`ExportRefused` for an ``import a.b`` that binds a renamed ``a``: no ``as``
    form binds the same module under another name and keeps ``a.b`` loaded.
    """
    if not renames:
        return source
    tree = parse_python(source)
    edits: list[tuple[Position, Position, str]] = []
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]
    lines = _lines(source)
    spans = [(_start(lines, node), _end(lines, node)) for node in imports]
    for node, (start, end) in zip(imports, spans, strict=True):
        written = _import_renamed(node, renames)
        if written is not None:
            edits.append((start, end, written))
    edits.extend(_name_edits(source, renames, spans))
    return _apply(source, edits)


def _position(lines: list[str], line: int, byte_column: int) -> Position:
    """ast counts columns in UTF-8 bytes, tokenize in characters: the tokenize position."""
    return line, len(lines[line - 1].encode()[:byte_column].decode())


def _start(lines: list[str], node: ast.stmt) -> Position:
    return _position(lines, node.lineno, node.col_offset)


def _end(lines: list[str], node: ast.stmt) -> Position:
    assert node.end_lineno is not None and node.end_col_offset is not None
    return _position(lines, node.end_lineno, node.end_col_offset)


def _import_renamed(node: ast.Import | ast.ImportFrom, renames: Mapping[str, str]) -> str | None:
    """The import written with ``as`` for its renamed names; None when it binds none of them."""
    aliases = []
    changed = False
    for alias in node.names:
        bound = alias.asname or alias.name
        if isinstance(node, ast.Import) and alias.asname is None and "." in alias.name:
            top = alias.name.split(".")[0]
            if top in renames:
                raise ExportRefused(
                    f"`import {alias.name}` binds {top!r}, which the other source binds "
                    "otherwise; write it as `import ... as ...` to export this job"
                )
            bound = top
        if bound in renames:
            aliases.append(ast.alias(name=alias.name, asname=renames[bound]))
            changed = True
        else:
            aliases.append(alias)
    if not changed:
        return None
    if isinstance(node, ast.Import):
        return ast.unparse(ast.Import(names=aliases))
    return ast.unparse(ast.ImportFrom(module=node.module, names=aliases, level=node.level))


def _name_edits(
    source: str, renames: Mapping[str, str], skipped: list[tuple[Position, Position]]
) -> list[tuple[Position, Position, str]]:
    """Edits for every token of a renamed name used as a variable: not an attribute after a
    dot, not a keyword argument of a call, not inside an import (those are written again whole)."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)]
    significant = [t for t in tokens if t.type not in _SKIPPED]
    brackets: list[str] = []  # "params" for a def's parameter list, else the bracket itself
    edits = []
    for i, token in enumerate(significant):
        before = significant[i - 1].string if i else ""
        if token.type == tokenize.OP and token.string in "([{":
            is_params = token.string == "(" and i >= 2 and significant[i - 2].string == "def"
            brackets.append("params" if is_params else token.string)
        elif token.type == tokenize.OP and token.string in ")]}" and brackets:
            brackets.pop()
        elif token.type == tokenize.NAME and token.string in renames:
            after = significant[i + 1].string if i + 1 < len(significant) else ""
            keyword = bool(brackets) and brackets[-1] == "(" and after == "="
            inside_import = any(start <= token.start < end for start, end in skipped)
            if before != "." and not keyword and not inside_import:
                edits.append((token.start, token.end, renames[token.string]))
    return edits


def _lines(source: str) -> list[str]:
    """The source's lines as tokenize reads them (split at "\\n" only), ends kept."""
    return io.StringIO(source).readlines()


def _apply(source: str, edits: list[tuple[Position, Position, str]]) -> str:
    lines = _lines(source)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(position: Position) -> int:
        return starts[position[0] - 1] + position[1]

    text = source
    for start, end, new in sorted(edits, key=lambda edit: offset(edit[0]), reverse=True):
        text = text[: offset(start)] + new + text[offset(end) :]
    return text
