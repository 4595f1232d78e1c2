"""The generic mutations for numeric programs: nudged floats, arithmetic operators, swapped calls,
duplicated lines. Each goes through the real applier and stays inside the EVOLVE-BLOCK."""

from __future__ import annotations

import ast
import re
from collections import Counter

import numpy as np
import pytest

from codevolve.proposers.generic import generic_mutations
from codevolve.proposers.simulated import SimulatedProposer
from tests.unit.proposers.test_simulated_proposer import (
    TOY,
    apply,
    make_prompt,
    mutation,
    outside_block,
)

NEW_KINDS = ("nudge_constant", "operator", "swap_call", "duplicate_line")
SEEDS = range(40)
FLOAT = re.compile(r"(?<![\w.])\d+\.\d+(?:e-?\d+)?")

NUMERIC = """\
import math

# EVOLVE-BLOCK-START
def f(x: float, y: float) -> float:
    scale = 0.75
    total = math.sin(x) * scale + math.cos(y) / 2.5
    total += max(x, y) - 1.0
    return min(total, 10) ** 2
# EVOLVE-BLOCK-END
"""


def children(kind: str, source: str) -> list[str]:
    found = []
    for seed in SEEDS:
        answer = mutation(kind).propose(make_prompt(source), np.random.default_rng(seed))
        assert answer is not None
        child = apply(source, answer)
        ast.parse(child)
        assert outside_block(child) == outside_block(source)
        found.append(child)
    return found


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_new_mutations_make_varied_children_inside_the_block(kind: str) -> None:
    # TOY calls no two functions with as many arguments: nothing to swap there.
    for source in (NUMERIC,) if kind == "swap_call" else (TOY, NUMERIC):
        assert len(set(children(kind, source))) > 2


def test_a_nudge_moves_one_float_by_a_small_factor_and_leaves_ints() -> None:
    before = [float(v) for v in FLOAT.findall(NUMERIC)]
    for child in children("nudge_constant", NUMERIC):
        after = [float(v) for v in FLOAT.findall(child)]
        changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
        assert len(changed) == 1
        old, new = changed[0]
        assert 0.0 < new / old < 3.0
        assert "min(total, 10) ** 2" in child


def test_operator_changes_one_arithmetic_operator() -> None:
    changed_aug = False
    for child in children("operator", NUMERIC):
        diff = [
            (a, b) for a, b in zip(NUMERIC.split("\n"), child.split("\n"), strict=True) if a != b
        ]
        assert len(diff) == 1
        changed_aug |= "total -= max(x, y)" in child or "total *= max(x, y)" in child
    assert changed_aug


def test_swap_call_uses_a_function_the_program_already_calls_with_as_many_arguments() -> None:
    for child in children("swap_call", NUMERIC):
        calls = {
            ast.unparse(node.func)
            for node in ast.walk(ast.parse(child))
            if isinstance(node, ast.Call)
        }
        assert calls <= {"math.sin", "math.cos", "max", "min"}
        assert child.count("math.sin(") + child.count("math.cos(") == 2


def test_duplicate_line_repeats_a_statement_right_after_itself() -> None:
    for child in children("duplicate_line", NUMERIC):
        old, new = NUMERIC.split("\n"), child.split("\n")
        assert len(new) == len(old) + 1
        index = next(i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b)
        original = new[index - 1]
        assert FLOAT.sub("#", new[index]) == FLOAT.sub("#", original)
        assert "scale = 0.75" not in new[index]  # constants are not shadowed


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_new_mutations_find_nothing_without_a_site(kind: str) -> None:
    plain = "# EVOLVE-BLOCK-START\nname = 'x'\n# EVOLVE-BLOCK-END\n"
    assert mutation(kind).propose(make_prompt(plain), np.random.default_rng(0)) is None


async def test_nudges_are_tried_first_most_often() -> None:
    proposer = SimulatedProposer([], domain_weight=0.0)
    kinds: Counter[str] = Counter()
    for seed in range(300):
        proposal = await proposer.propose(make_prompt(NUMERIC), np.random.default_rng(seed))
        kinds[proposal.proposer.removeprefix("simulated:")] += 1
    weights = {m.kind: m.weight for m in generic_mutations()}
    share = weights["nudge_constant"] / sum(weights.values())
    assert abs(kinds["nudge_constant"] / 300 - share) < 0.1
    assert kinds.most_common(1)[0][0] == "nudge_constant"
