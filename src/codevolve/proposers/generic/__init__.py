"""Mutations that work on any Python program: numbers and arithmetic (:mod:`.arithmetic`),
statements and control (:mod:`.statements`), each found in a parent parsed once (:mod:`.parsed`).

Each mutation finds its edit sites with ``ast`` and ``tokenize`` (so text inside strings and
comments is never touched), keeps to the EVOLVE-BLOCK regions (the whole file when there are no
markers), and emits one SEARCH/REPLACE hunk that occurs exactly once in the parent and leaves a
child that parses. It returns None when the parent offers no such site.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from codevolve.core.prompt import Prompt
from codevolve.proposers.generic import arithmetic, statements
from codevolve.proposers.generic.parsed import (
    LineEdit,
    ParsedSource,
    first_applicable,
    parse_source,
)

EditFinder = Callable[[ParsedSource, np.random.Generator], list[LineEdit]]


@dataclass(frozen=True, slots=True)
class GenericMutation:
    """A mutation made of a finder of candidate edits; one of them, at random, is emitted."""

    kind: str
    find_edits: EditFinder
    weight: float = 1.0  # relative chance of being tried first among the generic mutations

    def propose(self, prompt: Prompt, rng: np.random.Generator) -> str | None:
        parsed = parse_source(prompt.parent.source)
        if parsed is None:
            return None
        return first_applicable(parsed, self.find_edits(parsed, rng), rng)


def generic_mutations() -> tuple[GenericMutation, ...]:
    return (
        GenericMutation("constant", arithmetic.constant_edits),
        GenericMutation("comparison", statements.comparison_edits),
        GenericMutation("swap_statements", statements.swap_edits),
        GenericMutation("negate_condition", statements.negate_edits),
        # Small steps on floats make most of the progress on numeric programs.
        GenericMutation("nudge_constant", arithmetic.nudge_edits, weight=8.0),
        GenericMutation("operator", arithmetic.operator_edits),
        GenericMutation("swap_call", statements.swap_call_edits),
        GenericMutation("duplicate_line", statements.duplicate_edits),
    )
