"""``.codevolveignore``: gitignore-like lines that steer which files of a problem folder are
bundled.

Syntax (a subset of ``.gitignore``; see docs/openevolve.md):

- blank lines and lines starting with ``#`` are skipped; trailing spaces are dropped; ``\\#`` and
  ``\\!`` stand for a leading ``#`` or ``!``;
- ``PATTERN`` leaves out the files it matches; ``!PATTERN`` puts them in, even when the automatic
  selection would leave them out;
- a pattern ending in ``/`` matches folders only, and so everything inside them;
- a pattern with a ``/`` before its end is relative to the problem folder (a leading ``/`` is
  optional); one without matches a file or folder name at any depth;
- ``*`` matches any characters but ``/``, ``?`` one character but ``/``, ``[abc]``, ``[a-z]`` and
  ``[!abc]`` one character of a class; a whole component ``**`` matches any number of folders
  (``**/x``, ``x/**``, ``a/**/b``);
- the last line that matches a file or one of its folders decides. Unlike git, a file can be put
  back inside a folder that an earlier line left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

IGNORE_FILE = ".codevolveignore"


class PatternError(ValueError):
    """A line of ``.codevolveignore`` cannot be read; the message says why."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One line of ``.codevolveignore``."""

    line: int  # 1-based
    text: str  # as written, for messages
    include: bool  # "!PATTERN"
    folders_only: bool  # "PATTERN/"
    regex: re.Pattern[str]


def parse_rules(text: str) -> tuple[Rule, ...]:
    """The rules of an ignore file's text; PatternError names the line at fault."""
    rules: list[Rule] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        body = line[1:] if include else line
        if body.startswith(("\\#", "\\!")):
            body = body[1:]
        folders_only = body.endswith("/")
        body = body.rstrip("/")
        if not body.strip("/"):
            raise PatternError(f"line {number}: {raw!r} names no file")
        try:
            regex = re.compile(glob_regex(body.lstrip("/"), anchored="/" in body))
        except re.error as exc:
            raise PatternError(f"line {number}: {raw!r} is not a valid pattern ({exc})") from exc
        rules.append(Rule(number, line, include, folders_only, regex))
    return tuple(rules)


def decision(rules: Sequence[Rule], path: str) -> Rule | None:
    """The last rule matching ``path`` (a file, relative POSIX) or one of its folders."""
    parts = path.split("/")
    folders = ["/".join(parts[:end]) for end in range(1, len(parts))]
    found: Rule | None = None
    for rule in rules:
        names: Iterable[str] = folders if rule.folders_only else (*folders, path)
        if any(rule.regex.fullmatch(name) for name in names):
            found = rule
    return found


def glob_regex(pattern: str, *, anchored: bool) -> str:
    """A regular expression for a glob over relative POSIX paths (see the module's syntax)."""
    parts = pattern.split("/")
    out = [] if anchored else ["(?:.*/)?"]
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:.*/)?")
        else:
            out.append(_component(part) + ("" if last else "/"))
    return "".join(out)


def has_magic(text: str) -> bool:
    """Whether ``text`` holds a glob character."""
    return any(char in text for char in "*?[")


def _component(part: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(part):
        char = part[index]
        index += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\" and index < len(part):
            out.append(re.escape(part[index]))
            index += 1
        elif char == "[" and (end := part.find("]", index + 1)) != -1:
            members = part[index:end]
            negated = members.startswith(("!", "^"))
            members = members[1:] if negated else members
            escaped = members.replace("\\", "\\\\").replace("[", "\\[")
            out.append(f"[{'^/' if negated else ''}{escaped}]" if members else "(?!)")
            index = end + 1
        else:
            out.append(re.escape(char))
    return "".join(out)
