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

The pieces live beside this module: reading tests (rule_tests.py), the parent as rules and edits
of its lines (rule_program.py), the configs proposed (config_moves.py) and the tests written
(octaves.py). This module draws the edits and offers them as mutations.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.random import Generator

from codevolve.core.problem import Mutation
from codevolve.core.prompt import BestCase, Prompt
from codevolve.core.pysource import parse_python
from codevolve.problems.gemm_tiling.config_moves import (
    COHERENT_MOVES,
    fitted,
    move,
    neighbours,
    pick,
    textbook_configs,
)
from codevolve.problems.gemm_tiling.initial_program import GemmConfig
from codevolve.problems.gemm_tiling.octaves import (
    M_THRESHOLDS,
    MN_THRESHOLDS,
    NK_THRESHOLDS,
    OUTPUT_SIZE,
    below,
    directed_test,
    random_test,
    token_band,
)
from codevolve.problems.gemm_tiling.rule_program import (
    LineEdit,
    Rule,
    RuleProgram,
    insert_rule,
    parse_config,
    parse_shape,
    read_program,
    set_config,
)
from codevolve.problems.gemm_tiling.rule_tests import Shape, holds, thresholds

SHAPE_M = (1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)  # the benchmark's M values
SHAPE_NK = (  # (N, K) of the Llama-3.1-8B and 70B/TP8 projections
    (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
    (1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584),
)  # fmt: skip
TRAIN_GRID: tuple[Shape, ...] = tuple((m, n, k) for m in SHAPE_M for n, k in SHAPE_NK)
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
# How often a new octave rule is also bounded in M, the token count (see
# :func:`~codevolve.problems.gemm_tiling.octaves.token_band`), on the GPU problem: one output size
# is a decode shape of a wide projection and a prefill shape of a narrow one, and on the H200 the
# two want different tiles. The cost model's problem keeps plain octaves (docs/gemm_tiling.md,
# "Token bands", says why).
GPU_BAND_SHARE = 0.3


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
    config = pick(neighbours(rule.config), rng)
    return None if config is None else set_config(program, rule, config)


def threshold_edit(program: RuleProgram, prompt: Prompt, rng: Generator) -> LineEdit | None:
    """One constant of one test moves to a neighbouring M (powers of two) or N/K value."""
    sites = [site for rule in program.rules if rule.test for site in thresholds(rule.test)]
    if not sites:
        return None
    node, value, dim = sites[int(rng.integers(len(sites)))]
    ladder = {"M": M_THRESHOLDS, OUTPUT_SIZE: MN_THRESHOLDS}.get(dim, NK_THRESHOLDS)
    above = min((v for v in ladder if v > value), default=None)
    options = [v for v in (below(value, ladder), above) if v is not None]
    if not options or node.end_col_offset is None or node.end_lineno != node.lineno:
        return None
    row, raw = node.lineno - 1, program.lines[node.lineno - 1].encode()
    new = str(options[int(rng.integers(len(options)))])
    line = raw[: node.col_offset].decode() + new + raw[node.end_col_offset :].decode()
    return LineEdit(row, row + 1, (line,))


def add_rule_edit(
    program: RuleProgram, prompt: Prompt, rng: Generator, band_share: float = 0.0
) -> LineEdit | None:
    """A new rule: often a published config (scaled to the shape) for the octave of a scored
    shape drawn uniformly, placed where it takes that octave's scored shapes; otherwise a random
    range of the output size with a neighbouring rule's config, changed."""
    scored = _scored_shapes(prompt)
    if scored and rng.random() < TEXTBOOK_RULE_SHARE:
        shape = scored[int(rng.integers(len(scored)))]
        config = pick(textbook_configs(shape), rng)
        if config is None or config == program.config_for(shape)[1]:
            return None
        return _octave_rule(program, shape, scored, config, rng, band_share)
    index = int(rng.integers(len(program.rules) + 1))
    text = random_test(rng)
    if not _alive(program, index, parse_python(text, "eval").body, scored or TRAIN_GRID):
        return None
    around = program.all_rules[max(index - 1, 0) : index + 1]
    if not around:
        return None
    config = pick(neighbours(around[int(rng.integers(len(around)))].config), rng)
    return None if config is None else insert_rule(program, index, text, config)


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
    """A rule giving ``config`` to the octave of ``shape`` (see :func:`directed_test`), bounded
    in M too with probability ``band_share`` (see :func:`token_band`), placed before every rule
    that now takes a scored shape of that range, so the whole range gets it; the config of the
    rule found there is replaced instead when that rule has the same test."""
    text = directed_test(shape, rng, [m * n for m, n, _ in scored])
    if band_share and rng.random() < band_share:
        text = f"{text} and {token_band(shape[0], rng)}"
    test = parse_python(text, "eval").body
    index = min(program.config_for(s)[0] for s in (shape, *scored) if s == shape or holds(test, s))
    if index < len(program.rules) and program.rules[index].key == ast.dump(test):
        return set_config(program, program.rules[index], config)
    return insert_rule(program, index, text, config)


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
        return set_config(program, program.all_rules[keys.index(rule.key)], rule.config)
    if rule.test is None:  # the parent has no final return to give the inspiration's config
        return None
    anchors = (keys.index(r.key) + 1 for r in reversed(other.rules[:position]) if r.key in keys)
    index = next(anchors, min(position, len(program.rules)))
    return insert_rule(program, index, ast.unparse(rule.test), rule.config)


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
        textbook = pick(textbook_configs(shape), rng)
        if textbook is not None and textbook != current:
            return textbook
    fit = fitted(current, shape) if shape is not None else None
    if fit is not None and rng.random() < FIT_SHARE:
        return fit
    return pick([c for c in (move(current, m) for m in COHERENT_MOVES) if c is not None], rng)
