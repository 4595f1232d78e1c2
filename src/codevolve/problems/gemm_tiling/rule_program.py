"""A gemm-tiling parent read as the rule list ``choose_config`` is made of, and edits of its lines.

A program in this problem's shape reads::

    def choose_config(M, N, K):
        if M <= 32:                                   # a rule: tests of M, N, K against ints
            return GemmConfig(32, 64, 64, 2, 3, 8)
        ...
        return GemmConfig(128, 128, 64, 4, 3, 8)      # the final config

Programs are read with ``ast`` and never run; statements that are not rules are left alone. An
edit replaces lines of the EVOLVE block and renders as one SEARCH/REPLACE hunk, unique in the
parent, whose child parses. The shapes and configs that the parent's cases name are read here too.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from codevolve.core.diff import Diff, Hunk, unique_line_hunk
from codevolve.core.evolve_block import EVOLVE_END, EVOLVE_START
from codevolve.core.pysource import parse_python
from codevolve.problems.gemm_tiling.initial_program import GemmConfig
from codevolve.problems.gemm_tiling.rule_tests import Shape, holds, int_literal, understood

_SHAPE_PART = {dim: re.compile(rf"\b{dim}\s*=\s*(\d+)") for dim in "MNK"}
_CONFIG_TEXT = re.compile(r"GemmConfig\([^)]*\)")


# ------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``if test: return GemmConfig(...)``, or the final return when ``test`` is None."""

    start: int  # first line, 0-based
    end: int  # one past the last line
    test: ast.expr | None
    call: ast.Call  # the GemmConfig(...) call
    config: GemmConfig

    @property
    def key(self) -> str:
        """Equal for rules with the same test, however it is spaced."""
        return "final" if self.test is None else ast.dump(self.test)


@dataclass(frozen=True, slots=True)
class LineEdit:
    start: int  # 0-based
    end: int
    new_lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RuleProgram:
    """A parent read as rules; edits stay inside lines ``[low, high)``, its EVOLVE block."""

    source: str
    lines: list[str]
    rules: tuple[Rule, ...]  # the conditional rules, in order
    final: Rule | None
    indent: str  # of a rule's ``if``
    step: str  # added indentation of its ``return``
    low: int
    high: int

    @property
    def all_rules(self) -> tuple[Rule, ...]:
        return self.rules if self.final is None else (*self.rules, self.final)

    def config_for(self, shape: Shape) -> tuple[int, GemmConfig | None]:
        """The index of the first rule that takes the shape (len(rules): none) and its config."""
        for index, rule in enumerate(self.rules):
            if rule.test is not None and holds(rule.test, shape):
                return index, rule.config
        return len(self.rules), None if self.final is None else self.final.config

    def render(self, edit: LineEdit) -> str | None:
        """The edit as SEARCH/REPLACE text, or None when no unique hunk makes a parsable child."""
        hunk = _unique_hunk(self, edit)
        if hunk is None or not _parses(self.source.replace(hunk.search, hunk.replace, 1)):
            return None
        return Diff((hunk,)).render()


def read_program(source: str) -> RuleProgram | None:
    """The parent as rules, or None when it has no ``choose_config`` of rules in an EVOLVE block."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return None
    lines = source.split("\n")
    block = _evolve_block(lines)
    function = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "choose_config"), None
    )
    if function is None or block is None:
        return None
    if not block[0] <= function.lineno - 1 < (function.end_lineno or 0) <= block[1]:
        return None
    rules, final = [], None
    for statement in function.body:
        rule = _read_rule(statement)
        if rule is not None and rule.test is None:
            final = rule
            break  # what follows is unreachable
        if rule is not None:
            rules.append(rule)
    anchor = rules[0] if rules else final
    if anchor is None:
        return None
    indent = _indentation(lines[anchor.start])
    step = _indentation(lines[rules[0].call.lineno - 1])[len(indent) :] if rules else ""
    return RuleProgram(source, lines, tuple(rules), final, indent, step or "    ", *block)


def _read_rule(statement: ast.stmt) -> Rule | None:
    start, end = statement.lineno - 1, statement.end_lineno or statement.lineno
    if isinstance(statement, ast.Return) and isinstance(statement.value, ast.Call):
        config = read_config(statement.value)
        return None if config is None else Rule(start, end, None, statement.value, config)
    if not isinstance(statement, ast.If) or statement.orelse or len(statement.body) != 1:
        return None
    inner = _read_rule(statement.body[0])
    if inner is None or inner.test is not None or not understood(statement.test):
        return None
    return Rule(start, end, statement.test, inner.call, inner.config)


def read_config(call: ast.Call) -> GemmConfig | None:
    """The config of a ``GemmConfig(...)`` call of six int literals, positional or by name."""
    if not (isinstance(call.func, ast.Name) and call.func.id == "GemmConfig"):
        return None
    values = dict(zip(GemmConfig._fields, call.args, strict=False))
    for keyword in call.keywords:
        if keyword.arg is None or keyword.arg in values:
            return None
        values[keyword.arg] = keyword.value
    ints = [int_literal(values[name]) for name in GemmConfig._fields if name in values]
    checked = [v for v in ints if v is not None]
    return GemmConfig(*checked) if len(checked) == 6 and len(values) == 6 else None


def _indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _evolve_block(lines: list[str]) -> tuple[int, int] | None:
    """Lines strictly between the first START marker and the END after it; all without markers."""
    starts = [i for i, line in enumerate(lines) if line.strip().startswith(EVOLVE_START)]
    ends = [i for i, line in enumerate(lines) if line.strip().startswith(EVOLVE_END)]
    if not starts and not ends:
        return 0, len(lines)
    after = [e for e in ends if starts and e > starts[0]]
    return (starts[0] + 1, after[0]) if after else None


def _parses(source: str) -> bool:
    try:
        parse_python(source)
    except (SyntaxError, ValueError):
        return False
    return True


def _unique_hunk(program: RuleProgram, edit: LineEdit) -> Hunk | None:
    """The edit as a hunk whose SEARCH occurs once, widened by context lines inside the block."""
    return unique_line_hunk(
        program.source,
        start=edit.start,
        end=edit.end,
        new_lines=list(edit.new_lines),
        region=(program.low, program.high),
    )


def parse_shape(key: str) -> Shape | None:
    """(M, N, K) from a case key such as ``"M=16 N=6144 K=4096"``."""
    found = [_SHAPE_PART[dim].search(key) for dim in "MNK"]
    values = [int(f.group(1)) for f in found if f is not None]
    return (values[0], values[1], values[2]) if len(values) == 3 else None


def parse_config(detail: str) -> GemmConfig | None:
    """The config in a case detail such as ``"GemmConfig(64, 128, 64, 4, 3, 8)"``."""
    found = _CONFIG_TEXT.search(detail)
    if found is None:
        return None
    try:
        call = parse_python(found.group(0), "eval").body
    except SyntaxError:
        return None
    return read_config(call) if isinstance(call, ast.Call) else None


# ------------------------------------------------------------------- editing


def render_config(config: GemmConfig) -> str:
    """The config as the ``GemmConfig(...)`` call a rule returns."""
    return f"GemmConfig({', '.join(str(v) for v in config)})"


def set_config(program: RuleProgram, rule: Rule, config: GemmConfig) -> LineEdit:
    """Rewrite the rule's ``GemmConfig(...)`` call in place, keeping what surrounds it."""
    call, first = rule.call, rule.call.lineno - 1
    last = (call.end_lineno or call.lineno) - 1
    head = program.lines[first].encode()[: call.col_offset].decode()
    tail = program.lines[last].encode()[call.end_col_offset :].decode()
    return LineEdit(first, last + 1, (head + render_config(config) + tail,))


def insert_rule(program: RuleProgram, index: int, test: str, config: GemmConfig) -> LineEdit | None:
    """Insert a rule before rule ``index`` (the final return when index == len(rules))."""
    anchor = program.all_rules[index] if index < len(program.all_rules) else None
    if anchor is None:
        return None
    new = (
        f"{program.indent}if {test}:",
        f"{program.indent}{program.step}return {render_config(config)}",
    )
    return LineEdit(anchor.start, anchor.start, new)
