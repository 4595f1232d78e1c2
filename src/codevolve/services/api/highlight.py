"""Server-side rendering of code for the dashboard: Python syntax highlighting and unified diffs.

The highlighter uses the standard library's tokenizer, so it knows exactly what Python knows and
needs no client-side library; source that does not tokenize is shown plain from that point on.
"""

from __future__ import annotations

import builtins
import io
import keyword
import tokenize

from markupsafe import Markup, escape

_BUILTINS = frozenset(dir(builtins))
_STRING_TOKENS = frozenset(
    getattr(tokenize, name)
    for name in ("STRING", "FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
    if hasattr(tokenize, name)
)


def _kind(token: tokenize.TokenInfo, previous: str) -> str | None:
    if token.type == tokenize.NAME:
        if keyword.iskeyword(token.string) or keyword.issoftkeyword(token.string):
            return "kw"
        if previous in ("def", "class"):
            return "def"
        if token.string in _BUILTINS:
            return "builtin"
        return None
    if token.type in _STRING_TOKENS:
        return "str"
    if token.type == tokenize.NUMBER:
        return "num"
    if token.type == tokenize.COMMENT:
        return "com"
    if token.type == tokenize.OP and token.string == "@":
        return "kw"
    return None


def highlight_python(source: str) -> Markup:
    """``source`` as HTML with ``<span class="tok-KIND">`` around keywords, names being defined,
    builtins, strings, numbers and comments; everything else escaped as is."""
    starts = [0]  # offset of each line's first character
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    parts: list[str] = []
    done, previous = 0, ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            kind = _kind(token, previous)
            if token.type == tokenize.NAME:
                previous = token.string
            if kind is None or token.start[0] > len(starts):
                continue
            begin = starts[token.start[0] - 1] + token.start[1]
            end = starts[min(token.end[0], len(starts)) - 1] + token.end[1]
            if begin < done:
                continue
            parts.append(str(escape(source[done:begin])))
            parts.append(f'<span class="tok-{kind}">{escape(source[begin:end])}</span>')
            done = end
    except (tokenize.TokenError, SyntaxError):
        pass  # e.g. an unterminated string: the rest is shown plain
    parts.append(str(escape(source[done:])))
    return Markup("".join(parts))


def render_diff(diff: str) -> Markup:
    """A unified diff as lines classed ``add``, ``del``, ``hunk`` or ``ctx``."""
    lines = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        lines.append(f'<span class="diff-{kind}">{escape(line)}</span>')
    return Markup("".join(lines))  # each line is a block: no newline between them


def line_numbers(source: str) -> str:
    return "\n".join(str(n) for n in range(1, source.count("\n") + 2 - source.endswith("\n")))
