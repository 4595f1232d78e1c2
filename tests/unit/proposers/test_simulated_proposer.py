"""The simulated proposer and the generic mutations it falls back on."""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from codevolve.core.diff import Applied, Hunk
from codevolve.core.evolve_block import EVOLVE_END, EVOLVE_START
from codevolve.core.problem import Mutation
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.prompt_sampler.search_replace import ParsedAnswer, apply_answer, parse_answer
from codevolve.proposers.errors import ProposerError
from codevolve.proposers.generic import generic_mutations
from codevolve.proposers.simulated import NO_MUTATION, SimulatedProposer, weighted_order

FIXED_HEAD = '''\
"""A toy problem: everything outside the block is fixed."""

LIMIT = 10  # fixed: must never change
THRESHOLD = 0.5


def helper(x: float) -> bool:
    if x > LIMIT:
        return False
    low = 1
    high = 3
    return x < high and x >= low
'''
BLOCK = '''\
def solve(values: list[float]) -> float:
    """Sum values below 2.5 (a docstring with 7 < 8 and 1.5 in it)."""
    total = 0.0
    count = 0
    label = "x < 4 and y == 5"  # a string and a comment: 3 <= 9
    for value in values:
        if value < 2.5 and value != 0:
            total += value * 1.5
            count += 1
        elif not value > 100:
            total -= 1
    scale = 2
    total = total * scale
    return total / max(count, 1) if label else 0.0
'''
FIXED_TAIL = """
def check() -> int:
    return 1 if LIMIT == 10 else 2
"""
TOY = FIXED_HEAD + "\n\n" + EVOLVE_START + "\n" + BLOCK + EVOLVE_END + "\n" + FIXED_TAIL
KINDS = ("constant", "comparison", "swap_statements", "negate_condition")
SEEDS = range(40)


def apply(parent: str, answer: str) -> str:
    """The child through the real applier; the SEARCH text must also match exactly, once."""
    parsed = parse_answer(answer)
    assert isinstance(parsed, ParsedAnswer) and len(parsed.hunks) == 1
    assert parent.count(parsed.hunks[0].search) == 1
    outcome = apply_answer(parent, answer)
    assert isinstance(outcome, Applied), outcome
    return outcome.source


def make_prompt(source: str) -> Prompt:
    return Prompt(
        job_id="job",
        problem="toy",
        proposal_index=0,
        island=0,
        parent=ProgramView(id="parent", source=source, score=1.0),
        inspirations=(),
        best_cases={},
        context="",
        text="",
    )


def mutation(kind: str) -> Mutation:
    return next(m for m in generic_mutations() if m.kind == kind)


def outside_block(source: str) -> tuple[str, str]:
    head, _, rest = source.partition(EVOLVE_START)
    return head, rest.partition(EVOLVE_END)[2]


def string_and_comment_line(source: str) -> str:
    return next(line for line in source.split("\n") if "label =" in line)


@pytest.mark.parametrize("kind", KINDS)
def test_generic_mutations_edit_only_inside_the_evolve_block(kind: str) -> None:
    children = set()
    for seed in SEEDS:
        answer = mutation(kind).propose(make_prompt(TOY), np.random.default_rng(seed))
        assert answer is not None
        child = apply(TOY, answer)
        ast.parse(child)
        assert outside_block(child) == outside_block(TOY)
        assert '"""Sum values below 2.5 (a docstring with 7 < 8 and 1.5 in it)."""' in child
        assert string_and_comment_line(child) == string_and_comment_line(TOY)
        children.add(child)
    assert len(children) > 1


@pytest.mark.parametrize("kind", KINDS)
def test_generic_mutations_edit_the_whole_file_without_markers(kind: str) -> None:
    source = FIXED_HEAD + "\n\n" + BLOCK
    edited_fixed_part = False
    for seed in SEEDS:
        answer = mutation(kind).propose(make_prompt(source), np.random.default_rng(seed))
        assert answer is not None
        child = apply(source, answer)
        ast.parse(child)
        edited_fixed_part |= not child.startswith(FIXED_HEAD)
    assert edited_fixed_part


def test_constant_changes_exactly_one_number() -> None:
    for seed in SEEDS:
        answer = mutation("constant").propose(make_prompt(TOY), np.random.default_rng(seed))
        assert answer is not None
        before, after = numbers(TOY), numbers(apply(TOY, answer))
        assert len(before) == len(after)
        assert sum(a != b for a, b in zip(before, after, strict=True)) == 1


def numbers(source: str) -> list[object]:
    return [
        n.value
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Constant) and type(n.value) in (int, float)
    ]


def test_comparison_changes_exactly_one_operator() -> None:
    def operators(source: str) -> list[str]:
        tree = ast.parse(source)
        return [
            type(op).__name__ for n in ast.walk(tree) if isinstance(n, ast.Compare) for op in n.ops
        ]

    for seed in SEEDS:
        answer = mutation("comparison").propose(make_prompt(TOY), np.random.default_rng(seed))
        assert answer is not None
        before, after = operators(TOY), operators(apply(TOY, answer))
        assert sum(a != b for a, b in zip(before, after, strict=True)) == 1


def test_swap_exchanges_two_adjacent_lines() -> None:
    seen = set()
    for seed in SEEDS:
        answer = mutation("swap_statements").propose(make_prompt(TOY), np.random.default_rng(seed))
        assert answer is not None
        child = apply(TOY, answer)
        assert sorted(child.split("\n")) == sorted(TOY.split("\n"))
        seen.add(child)
    # total/count, count/label, scale/total and the two lines under the loop's ``if``
    assert len(seen) == 4


def test_negate_flips_one_condition_and_undoes_a_not() -> None:
    answers = {
        mutation("negate_condition").propose(make_prompt(TOY), np.random.default_rng(s))
        for s in SEEDS
    }
    children = {apply(TOY, a) for a in answers if a is not None}
    assert any("if not (value < 2.5 and value != 0):" in c for c in children)
    assert any("elif value > 100:" in c for c in children)


def test_a_repeated_line_gets_enough_context_to_be_unique() -> None:
    source = "def f(x):\n    y = 1\n    return x + y\n\n\ndef g(x):\n    y = 1\n    return x - y\n"
    for seed in SEEDS:
        answer = mutation("constant").propose(make_prompt(source), np.random.default_rng(seed))
        assert answer is not None
        apply(source, answer)


@pytest.mark.parametrize("kind", KINDS)
def test_generic_mutations_find_nothing_in_an_empty_block(kind: str) -> None:
    empty = "x = 1 < 2\n" + EVOLVE_START + "\n" + EVOLVE_END + "\n"
    assert mutation(kind).propose(make_prompt(empty), np.random.default_rng(0)) is None
    assert mutation(kind).propose(make_prompt("def f(:\n"), np.random.default_rng(0)) is None


@pytest.mark.parametrize("kind", [m.kind for m in generic_mutations()])
def test_generic_mutations_read_the_markers_as_the_applier_does(kind: str) -> None:
    # An END marker without a START leaves nothing editable for the applier, so an edit
    # anywhere would be refused as outside the EVOLVE-BLOCK: the mutations offer none.
    lone_end = FIXED_HEAD + "\n\n" + BLOCK + EVOLVE_END + "\n"
    for seed in range(10):
        assert mutation(kind).propose(make_prompt(lone_end), np.random.default_rng(seed)) is None


@dataclass(frozen=True)
class FixedMutation:
    """A domain mutation stand-in: always the same answer, or never one."""

    kind: str
    answer: str | None

    def propose(self, prompt: Prompt, rng: np.random.Generator) -> str | None:
        return self.answer


TOY_EDIT = Hunk("    scale = 2", "    scale = 3").render()


async def test_the_proposer_is_deterministic_for_a_seed() -> None:
    proposer = SimulatedProposer([FixedMutation("domain", TOY_EDIT)], domain_weight=0.5)
    first = [await proposer.propose(make_prompt(TOY), np.random.default_rng(s)) for s in SEEDS]
    again = [await proposer.propose(make_prompt(TOY), np.random.default_rng(s)) for s in SEEDS]
    assert first == again
    assert len({p.text for p in first}) > 5


async def test_the_proposer_picks_domain_mutations_at_their_weight() -> None:
    proposer = SimulatedProposer([FixedMutation("domain", TOY_EDIT)], domain_weight=0.7)
    picks: Counter[bool] = Counter()
    for seed in range(400):
        proposal = await proposer.propose(make_prompt(TOY), np.random.default_rng(seed))
        picks[proposal.proposer == "simulated:domain"] += 1
        assert proposal.error is None and proposal.text
    assert 0.62 < picks[True] / 400 < 0.78


async def test_the_proposer_falls_back_when_the_domain_mutation_does_not_apply() -> None:
    proposer = SimulatedProposer([FixedMutation("domain", None)], domain_weight=1.0)
    for seed in range(20):
        proposal = await proposer.propose(make_prompt(TOY), np.random.default_rng(seed))
        assert proposal.proposer.removeprefix("simulated:") in {m.kind for m in generic_mutations()}
        apply(TOY, proposal.text)


async def test_the_proposer_falls_back_to_domain_mutations_when_no_generic_one_applies() -> None:
    proposer = SimulatedProposer(
        [FixedMutation("domain", TOY_EDIT)],
        domain_weight=0.0,
        generic=[FixedMutation("generic", None)],
    )
    proposal = await proposer.propose(make_prompt(TOY), np.random.default_rng(0))
    assert proposal.proposer == "simulated:domain"


async def test_the_proposer_reports_when_nothing_applies() -> None:
    proposer = SimulatedProposer([FixedMutation("domain", None)], domain_weight=0.5)
    proposal = await proposer.propose(make_prompt("def f(:\n"), np.random.default_rng(0))
    assert proposal.text == "" and proposal.error == NO_MUTATION


async def test_the_proposer_stops_after_its_attempts() -> None:
    proposer = SimulatedProposer([FixedMutation("domain", None)], domain_weight=1.0, max_attempts=1)
    proposal = await proposer.propose(make_prompt(TOY), np.random.default_rng(0))
    assert proposal.error == NO_MUTATION


@pytest.mark.parametrize("weight", [-0.1, 1.5, float("nan")])
def test_the_proposer_rejects_a_weight_outside_zero_to_one(weight: float) -> None:
    with pytest.raises(ProposerError, match="domain_weight"):
        SimulatedProposer([], domain_weight=weight)


@pytest.mark.parametrize(
    "weights", [(1, 1, 1, 1, 8, 1, 1, 1), (1, 2, 3), (5, 1), (0.5, 7, 1, 3, 1, 2, 9, 1, 1, 4)]
)
def test_the_weighted_order_draws_exactly_what_numpys_choice_draws(
    weights: tuple[float, ...],
) -> None:
    p = np.array(weights, dtype=float) / sum(weights)
    for seed in range(500):
        ours, numpys = np.random.default_rng(seed), np.random.default_rng(seed)
        expected = [int(i) for i in numpys.choice(len(p), size=len(p), replace=False, p=p)]
        assert weighted_order(p.tolist(), ours) == expected
        assert ours.random() == numpys.random()  # the generators are left in the same state
