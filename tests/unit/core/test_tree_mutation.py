"""A domain mutation over the parent's ``ast``: its hunks as one diff, or None with a reason."""

from __future__ import annotations

import ast

import numpy as np

from codevolve.core.diff import Hunk
from codevolve.core.problem import TreeMutation
from codevolve.core.prompt import ProgramView, Prompt

PARENT = "x = 1\ny = 2\n"


def _prompt(source: str) -> Prompt:
    parent = ProgramView(id="parent", source=source, score=1.0)
    return Prompt("job", "problem", 0, 0, parent, (), {}, context="", text="")


def _replace(new: str) -> TreeMutation:
    def edit(
        source: str, tree: ast.Module, prompt: Prompt, rng: np.random.Generator
    ) -> list[Hunk] | None:
        assert isinstance(tree.body[0], ast.Assign) and prompt.parent.source == source
        return [Hunk(search="y = 2", replace=new)] if rng.random() < 2 else None

    return TreeMutation("replace", edit)


def test_the_edits_hunks_are_answered_as_one_diff() -> None:
    answer = _replace("y = 3").propose(_prompt(PARENT), np.random.default_rng(0))
    assert answer is not None and "y = 2" in answer and "y = 3" in answer


def test_no_answer_for_a_parent_that_does_not_parse_or_is_refused() -> None:
    rng = np.random.default_rng(0)
    mutation = _replace("y = 3")
    assert mutation.propose(_prompt("x = (\n"), rng) is None
    refused = TreeMutation(mutation.kind, mutation.edit, applies=lambda source: "z" in source)
    assert refused.propose(_prompt(PARENT), rng) is None


def test_a_child_that_would_not_parse_is_answered_only_when_unchecked() -> None:
    rng = np.random.default_rng(0)
    broken = _replace("y = (")
    assert broken.propose(_prompt(PARENT), rng) is not None  # the applier refuses it later
    checked = TreeMutation(broken.kind, broken.edit, check_child=True)
    assert checked.propose(_prompt(PARENT), rng) is None
