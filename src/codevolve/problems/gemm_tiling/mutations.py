"""Domain mutations for gemm tiling: edits of the rule list that ``choose_config`` is made of.

A program in this problem's shape reads::

    def choose_config(M, N, K):
        if M <= 32:                                   # a rule: tests of M, N, K against ints
            return GemmConfig(32, 64, 64, 2, 3, 8)
        ...
        return GemmConfig(128, 128, 64, 4, 3, 8)      # the final config

The six mutations change one field of a rule's config (``field``), one threshold of a test
(``threshold``), insert a rule (``add_rule``), delete one (``delete_rule``), copy one from an
inspiration (``borrow``), or insert one aimed at a shape where the parent is furthest from the
best cost the job has seen (``directed``). New rules test octave ranges of the output size
``M * N``, on the GPU problem some also a band of M (docs/gemm_tiling.md says why); the shapes
they are aimed at and placed by are those of the parent's cases, the shapes its score was
computed on. Programs are read with ``ast`` and never run; statements that are not rules are
left alone. New configs are launchable where a launchable
choice exists. Each mutation emits one SEARCH/REPLACE hunk, unique in the parent and confined to
the EVOLVE block, whose child parses.
"""

from __future__ import annotations

import ast
import functools
import itertools
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
from numpy.random import Generator

from codevolve.core.diff import Diff, Hunk, unique_line_hunk
from codevolve.core.evolve_block import EVOLVE_END, EVOLVE_START
from codevolve.core.problem import Mutation
from codevolve.core.prompt import BestCase, Prompt
from codevolve.core.pysource import parse_python
from codevolve.problems.gemm_tiling.initial_program import GemmConfig

FIELD_VALUES: dict[str, tuple[int, ...]] = {
    "block_m": (16, 32, 64, 128, 256),
    "block_n": (16, 32, 64, 128, 256),
    "block_k": (16, 32, 64, 128),
    "num_warps": (1, 2, 4, 8),
    "num_stages": (1, 2, 3, 4, 5),
    "group_m": (1, 4, 8),
}
M_THRESHOLDS = tuple(2**i for i in range(14))  # 1 .. 8192
# Thresholds of the output size M * N (elements of y): it decides how many tiles there are and so
# how the waves fill the SMs, which carries over from one projection to another where a test of N
# alone does not.
MN_THRESHOLDS = tuple(2**i for i in range(10, 29))  # 1024 .. 2**28
OUTPUT_SIZE = "M * N"
NK_THRESHOLDS = (1024, 1280, 3584, 4096, 6144, 7168, 8192, 14336, 28672)
SHAPE_M = (1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)  # the benchmark's M values
SHAPE_NK = (  # (N, K) of the Llama-3.1-8B and 70B/TP8 projections
    (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
    (1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584),
)  # fmt: skip
MAX_REGISTERS = 255  # per thread
MAX_SHARED_BYTES = 232448  # per block: 227 KiB
# Relative chances of being tried first (the simulated proposer's ``weight``): the moves that act
# on the feedback and the published configs are tried more often than the blind ones.
KIND_WEIGHTS = {"directed": 3.0, "add_rule": 3.0}
TEXTBOOK_RULE_SHARE = 0.9  # how often add_rule gives a scored shape's octave a published config
# Weight of a shape with no gap (the parent is at the best seen there) in the directed draw; the
# gap of a trailing shape adds to it. Keeps trying configs where nothing better is known yet.
EXPLORE_WEIGHT = 0.01
ATTEMPTS = 8  # random draws per proposal before a mutation gives up
GAP_TOLERANCE = 1e-6  # relative; a smaller gap to the best cost is noise, not a target
BEST_SHARE = 0.5  # how often the directed mutation copies the best config seen for its shape
FIT_SHARE = 0.3  # otherwise, how often it fits the current tile to M instead of a coherent move
TEXTBOOK_SHARE = 0.25  # or tries a config of a published list, scaled to the shape
WIDEN_SHARE = 0.5  # how often a directed rule's octave is widened by one below (or above)
# How often a new octave rule is also bounded in M, the token count (see :func:`_token_band`), on
# the GPU problem: one output size is a decode shape of a wide projection and a prefill shape of a
# narrow one, and on the H200 the two want different tiles. The cost model's problem keeps plain
# octaves (docs/gemm_tiling.md, "Token bands", says why).
GPU_BAND_SHARE = 0.3
# (block_m, block_n, block_k, num_stages, num_warps): the Triton matmul tutorial's autotune list
# (triton-lang/triton python/tutorials/03-matrix-multiplication.py) and PyTorch inductor's mm
# configs (torch/_inductor/template_heuristics), public data recorded in the research notes.
TEXTBOOK_LISTS: tuple[tuple[int, int, int, int, int], ...] = (
    (128, 256, 64, 3, 8), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2), (32, 64, 32, 5, 2),
    (128, 256, 128, 3, 8), (256, 128, 128, 3, 8), (256, 64, 128, 4, 4), (64, 256, 128, 4, 4),
    (128, 128, 128, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 32, 64, 4, 4),
    (32, 32, 16, 1, 2), (32, 32, 128, 2, 4), (32, 64, 32, 5, 8), (64, 32, 32, 5, 8),
    (64, 32, 128, 5, 4), (64, 64, 16, 2, 4), (64, 64, 32, 2, 4), (64, 64, 64, 3, 8),
    (64, 64, 128, 5, 4), (64, 128, 32, 3, 4), (64, 128, 32, 4, 8), (64, 128, 64, 3, 4),
    (64, 128, 128, 4, 4), (128, 64, 32, 3, 4), (128, 64, 32, 4, 8), (128, 128, 32, 2, 8),
    (128, 128, 32, 3, 4), (128, 128, 64, 3, 4), (128, 128, 64, 5, 8), (128, 128, 128, 4, 8),
)  # fmt: skip
# Coherent moves of the directed mutation: (field, steps along its value list) changed together,
# e.g. a taller tile with more warps, a narrower one with a deeper pipeline.
COHERENT_MOVES: tuple[tuple[tuple[str, int], ...], ...] = (
    (("block_m", 1), ("num_warps", 1)), (("block_m", -1), ("num_warps", -1)),
    (("block_n", 1), ("num_warps", 1)), (("block_n", -1), ("num_stages", 1)),
    (("block_k", 1), ("num_stages", -1)), (("block_k", -1), ("num_stages", 1)),
    (("block_m", 1), ("block_n", -1)), (("block_m", -1), ("block_n", 1)),
    (("num_stages", 1),), (("num_stages", -1),), (("num_warps", 1),), (("num_warps", -1),),
    (("group_m", 1),), (("group_m", -1),),
)  # fmt: skip

Shape = tuple[int, int, int]  # (M, N, K)
TRAIN_GRID: tuple[Shape, ...] = tuple((m, n, k) for m in SHAPE_M for n, k in SHAPE_NK)
_COMPARISONS: dict[type[ast.cmpop], Callable[[float, float], bool]] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}  # fmt: skip
_ARITHMETIC: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}  # fmt: skip
_SHAPE_PART = {dim: re.compile(rf"\b{dim}\s*=\s*(\d+)") for dim in "MNK"}
_CONFIG_TEXT = re.compile(r"GemmConfig\([^)]*\)")


def launchable(config: GemmConfig) -> bool:
    """Registers, shared memory and warps within the launch limits of DESIGN section 8."""
    bm, bn, bk, warps, stages, _ = config
    registers = bm * bn / (32 * warps) + 40
    shared = stages * (bm + bn) * bk * 2  # bytes, bf16
    return registers <= MAX_REGISTERS and shared <= MAX_SHARED_BYTES and warps <= bm * bn / 256


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
    ints = [_int(values[name]) for name in GemmConfig._fields if name in values]
    checked = [v for v in ints if v is not None]
    return GemmConfig(*checked) if len(checked) == 6 and len(values) == 6 else None


def _int(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return int(node.value)
    return None


def understood(test: ast.expr) -> bool:
    """Comparisons of M, N, K, number literals and arithmetic of them (``M * N``, ``M / N``,
    ``K // 2``: what the generic mutations make of a test), joined by and, or, not. A rule whose
    test is understood is read, so the mutations know which shapes it takes; any other ``if``
    is left alone and seen as taking none."""
    if isinstance(test, ast.BoolOp):
        return all(understood(v) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return understood(test.operand)
    if isinstance(test, ast.Compare):
        operands = (test.left, *test.comparators)
        return all(type(op) in _COMPARISONS for op in test.ops) and all(map(_is_term, operands))
    return False


def _number(node: ast.expr) -> int | float | None:
    value = node.value if isinstance(node, ast.Constant) else None
    return value if type(value) is int or type(value) is float else None


def _is_term(node: ast.expr) -> bool:
    """A dimension, a number literal, or + - * / // % of such terms."""
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _is_term(node.left) and _is_term(node.right)
    return _is_dim(node) or _number(node) is not None


def _is_product(node: ast.expr) -> TypeGuard[ast.BinOp]:
    """A product of dimensions, such as ``M * N``."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
        return False
    return all(_is_dim(side) or _is_product(side) for side in (node.left, node.right))


def holds(test: ast.expr, shape: Shape) -> bool:
    """Whether the shape meets an understood test (the program itself never runs here)."""
    if isinstance(test, ast.BoolOp):
        results = (holds(v, shape) for v in test.values)
        return all(results) if isinstance(test.op, ast.And) else any(results)
    if isinstance(test, ast.UnaryOp):
        return not holds(test.operand, shape)
    if not isinstance(test, ast.Compare):
        return False
    values = [_operand(o, shape) for o in (test.left, *test.comparators)]
    pairs = zip(test.ops, values, values[1:], strict=False)
    return all(
        a is not None and b is not None and _COMPARISONS[type(op)](a, b) for op, a, b in pairs
    )


def _operand(node: ast.expr, shape: Shape) -> int | float | None:
    """The term's value for the shape, as Python computes it; None where it cannot (a division
    by zero: the program itself fails there)."""
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _operand(node.left, shape), _operand(node.right, shape)
        if left is None or right is None:
            return None
        try:
            return _ARITHMETIC[type(node.op)](left, right)  # type: ignore[no-any-return]
        except ZeroDivisionError:
            return None
    return shape["MNK".index(node.id)] if _is_dim(node) else _number(node)


def _is_dim(node: ast.expr) -> TypeGuard[ast.Name]:
    return isinstance(node, ast.Name) and node.id in ("M", "N", "K")


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


# ------------------------------------------------------------------- editing


def render(config: GemmConfig) -> str:
    return f"GemmConfig({', '.join(str(v) for v in config)})"


def _set_config(program: RuleProgram, rule: Rule, config: GemmConfig) -> LineEdit:
    """Rewrite the rule's ``GemmConfig(...)`` call in place, keeping what surrounds it."""
    call, first = rule.call, rule.call.lineno - 1
    last = (call.end_lineno or call.lineno) - 1
    head = program.lines[first].encode()[: call.col_offset].decode()
    tail = program.lines[last].encode()[call.end_col_offset :].decode()
    return LineEdit(first, last + 1, (head + render(config) + tail,))


def _insert(program: RuleProgram, index: int, test: str, config: GemmConfig) -> LineEdit | None:
    """Insert a rule before rule ``index`` (the final return when index == len(rules))."""
    anchor = program.all_rules[index] if index < len(program.all_rules) else None
    if anchor is None:
        return None
    new = (f"{program.indent}if {test}:", f"{program.indent}{program.step}return {render(config)}")
    return LineEdit(anchor.start, anchor.start, new)


def _alive(
    program: RuleProgram, index: int, test: ast.expr, shapes: Sequence[Shape] = TRAIN_GRID
) -> bool:
    """Whether a rule inserted before rule ``index`` would take at least one of the shapes."""
    earlier = [r.test for r in program.rules[:index] if r.test is not None]
    return any(holds(test, s) and not any(holds(t, s) for t in earlier) for s in shapes)


def _in_use(program: RuleProgram, shapes: Sequence[Shape]) -> tuple[Rule, ...]:
    """The rules (the final return included) that take at least one of the shapes; all rules
    when no shape is known. A rule that takes no scored shape has a config the score never
    judged, so editing it changes nothing the search can see."""
    if not shapes:
        return program.all_rules
    taken = {program.config_for(s)[0] for s in shapes}
    return tuple(rule for i, rule in enumerate(program.all_rules) if i in taken)


def _neighbours(config: GemmConfig) -> list[GemmConfig]:
    """Configs one step away along one field."""
    moves = [((name, step),) for name in GemmConfig._fields for step in (-1, 1)]
    return [c for c in (_move(config, m) for m in moves) if c is not None]


def _move(config: GemmConfig, move: Sequence[tuple[str, int]]) -> GemmConfig | None:
    """The config with each named field stepped along its value list; None past an end."""
    changes = {}
    for name, step in move:
        values, current = FIELD_VALUES[name], getattr(config, name)
        position = min(range(len(values)), key=lambda i: abs(values[i] - current)) + step
        if not 0 <= position < len(values):
            return None
        changes[name] = values[position]
    moved = config._replace(**changes)
    return None if moved == config else moved


def _pick(options: Sequence[GemmConfig], rng: Generator) -> GemmConfig | None:
    """A random option, from the launchable ones when there are any."""
    pool = [o for o in options if launchable(o)] or list(options)
    return pool[int(rng.integers(len(pool)))] if pool else None


def _choice(options: Sequence[str], weights: Sequence[float], rng: Generator) -> str:
    p = np.asarray(weights, dtype=float)
    return options[int(rng.choice(len(options), p=p / p.sum()))]


def _below(value: int, ladder: Sequence[int]) -> int | None:
    return max((v for v in ladder if v < value), default=None)


# ----------------------------------------------------------------- mutations

RuleEdit = Callable[[RuleProgram, Prompt, Generator], LineEdit | None]


@dataclass(frozen=True, slots=True)
class GemmMutation:
    """A mutation of the rule list: ``edit`` draws one edit, which may not render; redraw then."""

    kind: str
    edit: RuleEdit
    weight: float = 1.0  # relative chance of being tried first (see the simulated proposer)

    def propose(self, prompt: Prompt, rng: Generator) -> str | None:
        program = read_program(prompt.parent.source)
        if program is None:
            return None
        for _ in range(ATTEMPTS):
            edit = self.edit(program, prompt, rng)
            text = None if edit is None else program.render(edit)
            if text is not None:
                return text
        return None


def gemm_mutations(band_share: float = 0.0) -> tuple[Mutation, ...]:
    """The six mutations; ``band_share`` of the new octave rules of ``add_rule`` and
    ``directed`` are also bounded in M (:data:`GPU_BAND_SHARE` on the GPU problem)."""
    add_rule = functools.partial(add_rule_edit, band_share=band_share)
    directed = functools.partial(directed_edit, band_share=band_share)
    return (
        GemmMutation("field", field_edit),
        GemmMutation("threshold", threshold_edit),
        GemmMutation("add_rule", add_rule, KIND_WEIGHTS["add_rule"]),
        GemmMutation("delete_rule", delete_rule_edit),
        GemmMutation("borrow", borrow_edit),
        GemmMutation("directed", directed, KIND_WEIGHTS["directed"]),
    )


def field_edit(program: RuleProgram, prompt: Prompt, rng: Generator) -> LineEdit | None:
    """One field of one rule's config moves to a neighbouring value; the rule takes a scored
    shape when the parent's cases name any."""
    rules = _in_use(program, _scored_shapes(prompt))
    if not rules:
        return None
    rule = rules[int(rng.integers(len(rules)))]
    config = _pick(_neighbours(rule.config), rng)
    return None if config is None else _set_config(program, rule, config)


def threshold_edit(program: RuleProgram, prompt: Prompt, rng: Generator) -> LineEdit | None:
    """One constant of one test moves to a neighbouring M (powers of two) or N/K value."""
    sites = [site for rule in program.rules if rule.test for site in _thresholds(rule.test)]
    if not sites:
        return None
    node, value, dim = sites[int(rng.integers(len(sites)))]
    ladder = {"M": M_THRESHOLDS, OUTPUT_SIZE: MN_THRESHOLDS}.get(dim, NK_THRESHOLDS)
    above = min((v for v in ladder if v > value), default=None)
    options = [v for v in (_below(value, ladder), above) if v is not None]
    if not options or node.end_col_offset is None or node.end_lineno != node.lineno:
        return None
    row, raw = node.lineno - 1, program.lines[node.lineno - 1].encode()
    new = str(options[int(rng.integers(len(options)))])
    line = raw[: node.col_offset].decode() + new + raw[node.end_col_offset :].decode()
    return LineEdit(row, row + 1, (line,))


def _thresholds(test: ast.expr) -> list[tuple[ast.expr, int, str]]:
    """Each int literal compared with M, N, K or a product of them: the node, its value and what
    it is compared with (``"M"``, ``"N"``, ``"K"`` or the product's text)."""
    sites = []
    for node in ast.walk(test):
        operands = [node.left, *node.comparators] if isinstance(node, ast.Compare) else []
        for a, b in itertools.pairwise(operands):
            for name, literal in ((a, b), (b, a)):
                value = _int(literal)
                if value is not None and (_is_dim(name) or _is_product(name)):
                    sites.append((literal, value, ast.unparse(name)))
    return sites


def add_rule_edit(
    program: RuleProgram, prompt: Prompt, rng: Generator, band_share: float = 0.0
) -> LineEdit | None:
    """A new rule: often a published config (scaled to the shape) for the octave of a scored
    shape drawn uniformly, placed where it takes that octave's scored shapes; otherwise a random
    range of the output size with a neighbouring rule's config, changed."""
    scored = _scored_shapes(prompt)
    if scored and rng.random() < TEXTBOOK_RULE_SHARE:
        shape = scored[int(rng.integers(len(scored)))]
        config = _pick(textbook_configs(shape), rng)
        if config is None or config == program.config_for(shape)[1]:
            return None
        return _octave_rule(program, shape, scored, config, rng, band_share)
    index = int(rng.integers(len(program.rules) + 1))
    text = _random_test(rng)
    if not _alive(program, index, parse_python(text, "eval").body, scored or TRAIN_GRID):
        return None
    around = program.all_rules[max(index - 1, 0) : index + 1]
    if not around:
        return None
    config = _pick(_neighbours(around[int(rng.integers(len(around)))].config), rng)
    return None if config is None else _insert(program, index, text, config)


def _scored_shapes(prompt: Prompt) -> list[Shape]:
    """The shapes the parent was scored on (its cases), in their order."""
    return [s for s in (parse_shape(case.key) for case in prompt.parent.cases) if s is not None]


def _octave_rule(
    program: RuleProgram,
    shape: Shape,
    scored: Sequence[Shape],
    config: GemmConfig,
    rng: Generator,
    band_share: float = 0.0,
) -> LineEdit | None:
    """A rule giving ``config`` to the octave of ``shape`` (see :func:`_directed_test`), bounded
    in M too with probability ``band_share`` (see :func:`_token_band`), placed before every rule
    that now takes a scored shape of that range, so the whole range gets it; the config of the
    rule found there is replaced instead when that rule has the same test."""
    text = _directed_test(shape, rng, [m * n for m, n, _ in scored])
    if band_share and rng.random() < band_share:
        text = f"{text} and {_token_band(shape[0], rng)}"
    test = parse_python(text, "eval").body
    index = min(program.config_for(s)[0] for s in (shape, *scored) if s == shape or holds(test, s))
    if index < len(program.rules) and program.rules[index].key == ast.dump(test):
        return _set_config(program, program.rules[index], config)
    return _insert(program, index, text, config)


def _token_band(m: int, rng: Generator) -> str:
    """A test of M around ``m`` on the powers of two: above the one below it, at most the one at
    or above it, or both. Within one output-size octave, ``M > 16`` keeps the narrow projections'
    prefill shapes and ``M <= 16`` the wide projections' decode shapes."""
    low = _below(m, M_THRESHOLDS)  # None for M = 1
    high = min((v for v in M_THRESHOLDS if v >= m), default=None)  # None past 8192
    forms = [f"M > {low}"] if low is not None else []
    forms += [f"M <= {high}"] if high is not None else []
    if len(forms) == 2:
        forms.append(" and ".join(forms))
    return forms[int(rng.integers(len(forms)))]


def _random_test(rng: Generator) -> str:
    """A range of the output size one to three octaves wide, or everything above or below it."""
    top = int(rng.integers(1, len(MN_THRESHOLDS)))
    low = MN_THRESHOLDS[top - int(rng.integers(1, min(3, top) + 1))]
    return _output_size_test(low, MN_THRESHOLDS[top], rng)


def delete_rule_edit(program: RuleProgram, prompt: Prompt, rng: Generator) -> LineEdit | None:
    """One conditional rule goes; the final return always stays."""
    if not program.rules:
        return None
    rule = program.rules[int(rng.integers(len(program.rules)))]
    return LineEdit(rule.start, rule.end, ())


def borrow_edit(program: RuleProgram, prompt: Prompt, rng: Generator) -> LineEdit | None:
    """A rule of an inspiration the parent lacks: it replaces the parent's rule with the same test,
    or goes after the parent's copy of the rule it follows in the inspiration."""
    ours = {(r.key, r.config) for r in program.all_rules}
    candidates = [
        (other, position, rule)
        for other in filter(None, (read_program(view.source) for view in prompt.inspirations))
        for position, rule in enumerate(other.all_rules)
        if (rule.key, rule.config) not in ours
    ]
    if not candidates:
        return None
    other, position, rule = candidates[int(rng.integers(len(candidates)))]
    keys = [r.key for r in program.all_rules]
    if rule.key in keys:
        return _set_config(program, program.all_rules[keys.index(rule.key)], rule.config)
    if rule.test is None:  # the parent has no final return to give the inspiration's config
        return None
    anchors = (keys.index(r.key) + 1 for r in reversed(other.rules[:position]) if r.key in keys)
    index = next(anchors, min(position, len(program.rules)))
    return _insert(program, index, ast.unparse(rule.test), rule.config)


def directed_edit(
    program: RuleProgram, prompt: Prompt, rng: Generator, band_share: float = 0.0
) -> LineEdit | None:
    """A rule for the octave of a shape where the parent trails the best cost seen (see
    :func:`_octave_rule`)."""
    target = _target_case(prompt, rng)
    if target is None:
        return None
    shape, best = target
    config = _directed_config(program.config_for(shape)[1], best, rng, shape)
    if config is None:
        return None
    return _octave_rule(program, shape, _scored_shapes(prompt), config, rng, band_share)


def _target_case(prompt: Prompt, rng: Generator) -> tuple[Shape, BestCase] | None:
    """A case of the parent drawn with weight (gap - 1), gap = parent's cost / best cost seen,
    plus ``EXPLORE_WEIGHT``: a case where the parent is at the best seen is drawn rarely, and then
    gets another config (published, fitted to M or a coherent move)."""
    targets: list[tuple[Shape, BestCase]] = []
    weights: list[float] = []
    for case in prompt.parent.cases:
        best = prompt.best_cases.get(case.key)
        shape = parse_shape(case.key)
        if best is None or shape is None or not best.cost > 0:
            continue
        gap = case.cost / best.cost
        if 1 + GAP_TOLERANCE < gap < float("inf"):
            targets.append((shape, best))
            weights.append(gap - 1 + EXPLORE_WEIGHT)
        elif EXPLORE_WEIGHT > 0 and gap <= 1 + GAP_TOLERANCE:
            targets.append((shape, best))
            weights.append(EXPLORE_WEIGHT)
    if not targets:
        return None
    p = np.asarray(weights) / sum(weights)
    return targets[int(rng.choice(len(targets), p=p))]


def _directed_config(
    current: GemmConfig | None, best: BestCase, rng: Generator, shape: Shape | None = None
) -> GemmConfig | None:
    """The best config seen for the shape, the current one fitted to the shape's M, or the
    current one changed coherently."""
    best_config = parse_config(best.detail)
    differs = best_config is not None and best_config != current
    if differs and (current is None or rng.random() < BEST_SHARE):
        return best_config
    if current is None:
        return None
    if shape is not None and rng.random() < TEXTBOOK_SHARE:
        textbook = _pick(textbook_configs(shape), rng)
        if textbook is not None and textbook != current:
            return textbook
    fitted = _fitted(current, shape) if shape is not None else None
    if fitted is not None and rng.random() < FIT_SHARE:
        return fitted
    return _pick([c for c in (_move(current, m) for m in COHERENT_MOVES) if c is not None], rng)


def textbook_configs(shape: Shape) -> list[GemmConfig]:
    """Published config lists (the Triton matmul tutorial's autotune list and PyTorch inductor's
    mm list, as the research notes record them) scaled to the shape the way inductor does: each
    block no larger than its dimension padded to a power of two (at least 16), warps clamped so
    each owns a 16x16 tile. What an engineer who has read those sources would try first."""
    m, n, k = shape

    def padded(dim: int) -> int:
        return max(16, 1 << max(0, (dim - 1).bit_length()))

    configs = []
    for bm, bn, bk, stages, warps in TEXTBOOK_LISTS:
        bm, bn, bk = min(bm, padded(m)), min(bn, padded(n)), min(bk, padded(k))
        warps = max(1, min(warps, bm * bn // 256))
        group_m = 1 if m <= bm else 8
        config = GemmConfig(bm, bn, bk, warps, stages, group_m)
        if launchable(config) and config not in configs:
            configs.append(config)
    return configs


def _fitted(config: GemmConfig, shape: Shape) -> GemmConfig | None:
    """The textbook fit of a tile to M: block_m no taller than M padded to a power of two (at
    least 16), and no swizzle groups (group_m 1) when one tile row covers all of M."""
    m = shape[0]
    padded = max(16, min(256, 1 << max(0, (m - 1).bit_length())))
    block_m = min(config.block_m, padded)
    group_m = 1 if m <= block_m else config.group_m
    fitted = config._replace(block_m=block_m, group_m=group_m)
    return fitted if fitted != config and launchable(fitted) else None


def _directed_test(shape: Shape, rng: Generator, sizes: Sequence[int] = ()) -> str:
    """The octave of the output size ``M * N`` that holds the shape, ``2**i < M * N <= 2**(i+1)``,
    sometimes widened by an octave below or above, so the rule carries over to the other
    projections of that size and never targets one shape. A range with none of the scored
    ``sizes`` above it (below it) stays open upward (downward): past the largest (smallest) size
    the score shows, the nearest regime is the best guess. Bounds lie on ``MN_THRESHOLDS``."""
    size = shape[0] * shape[1]
    low = max((v for v in MN_THRESHOLDS if v < size), default=None)
    high = min((v for v in MN_THRESHOLDS if v >= size), default=None)
    if rng.random() < WIDEN_SHARE and low is not None:
        low = _below(low, MN_THRESHOLDS) or low
    if rng.random() < WIDEN_SHARE and high is not None:
        high = min((v for v in MN_THRESHOLDS if v > high), default=high)
    # Octaves between the range and the nearest scored sizes hold no scored shape: the range
    # reaches over them, so the sizes the score never shows get the nearest regime's config.
    under = max((s for s in sizes if s <= (low or 0)), default=None)
    over = min((s for s in sizes if s > (high or 2**62)), default=None)
    if low is not None and under is not None:
        low = min((v for v in MN_THRESHOLDS if v >= under), default=low)
    if high is not None and over is not None:
        high = max((v for v in MN_THRESHOLDS if v < over), default=high)
    if low is not None and (high is None or (sizes and all(s <= high for s in sizes))):
        return f"M * N > {low}"
    if high is not None and (low is None or (sizes and all(s > low for s in sizes))):
        return f"M * N <= {high}"
    return f"M * N > {low} and M * N <= {high}"


def _output_size_test(low: int, high: int, rng: Generator) -> str:
    """A test of the output size: at most ``high``, above ``low``, or between the two."""
    form = _choice(("le", "range", "gt"), (1, 4, 1), rng)
    return {
        "le": f"M * N <= {high}",
        "range": f"M * N > {low} and M * N <= {high}",
        "gt": f"M * N > {low}",
    }[form]


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
