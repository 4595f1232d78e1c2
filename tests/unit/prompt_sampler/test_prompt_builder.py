"""The prompt builder: what a proposer is shown, in what order, and what it is never shown."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from codevolve.core.diff import SEARCH_MARKER
from codevolve.core.evolve_block import EVOLVE_END, EVOLVE_START
from codevolve.core.program import CaseResult, Evaluation, ProgramStatus, StageResult
from codevolve.core.prompt import BestCase, ProgramView, Prompt
from codevolve.prompt_sampler.builder import TASK_LINES, build_prompt, feedback_gaps
from codevolve.prompt_sampler.errors import PromptSamplerError
from codevolve.prompt_sampler.search_replace import ParsedAnswer, parse_answer

SOURCE = """\
LIMIT = 10


# EVOLVE-BLOCK-START
def choose(m: int) -> int:
    return 64 if m < LIMIT else 128
# EVOLVE-BLOCK-END
"""

CONTEXT = "Pick a tile size for each shape; lower time is better."


def best(key: str, cost: float, detail: str = "") -> BestCase:
    return BestCase(key=key, cost=cost, detail=detail or f"best-of-{key}", program_id="b" * 32)


PARENT = ProgramView(
    id="p" * 32,
    source=SOURCE,
    score=1.25,
    metrics={"speedup": 1.25, "valid_fraction": 1.0},
    cases=(
        CaseResult("m=1", 10.0, "tile 64"),
        CaseResult("m=16", 30.0, "tile 64"),
        CaseResult("m=256", 50.0, "tile 128"),
        CaseResult("m=4096", 90.0, "tile 128"),
    ),
    feedback="shape m=16 is slow",
    error="Traceback: something broke",
)
BEST_CASES = {
    "m=1": best("m=1", 10.0),  # the parent is the best here: no gap
    "m=16": best("m=16", 10.0),  # 3x
    "m=256": best("m=256", 25.0),  # 2x
    "m=4096": best("m=4096", 60.0),  # 1.5x
}
INSPIRATIONS = (
    ProgramView(id="i" * 32, source="X = 'inspiration one'\n", score=1.5, metrics={"speedup": 1.5}),
    ProgramView(id="j" * 32, source="X = 'inspiration two'\n", score=0.75),
)


def prompt_for(
    seed: int = 0,
    *,
    parent: ProgramView = PARENT,
    max_feedback_cases: int = 8,
    best_cases: dict[str, BestCase] | None = None,
) -> Prompt:
    return build_prompt(
        job_id="job-1",
        problem="tiles",
        context=CONTEXT,
        proposal_index=7,
        island=2,
        parent=parent,
        inspirations=INSPIRATIONS,
        best_cases=BEST_CASES if best_cases is None else best_cases,
        rng=np.random.default_rng(seed),
        max_feedback_cases=max_feedback_cases,
    )


def test_the_prompt_shows_context_parent_feedback_inspirations_and_format() -> None:
    text = prompt_for().text
    for expected in (
        CONTEXT,
        "```python\n" + SOURCE.rstrip() + "\n```",
        "Score: 1.25",
        "speedup=1.25, valid_fraction=1",
        "shape m=16 is slow",
        "Traceback: something broke",
        "X = 'inspiration one'",
        "(score 1.5)",
        "X = 'inspiration two'",
        "(score 0.75)",
        SEARCH_MARKER,
        EVOLVE_START,
        EVOLVE_END,
        "full rewrite",
    ):
        assert expected in text, expected


def test_the_prompt_carries_the_structured_fields_it_was_built_from() -> None:
    prompt = prompt_for()
    assert (prompt.job_id, prompt.problem, prompt.proposal_index, prompt.island) == (
        "job-1",
        "tiles",
        7,
        2,
    )
    assert prompt.parent == PARENT
    assert prompt.inspirations == INSPIRATIONS
    assert dict(prompt.best_cases) == BEST_CASES
    assert prompt.context == CONTEXT


def test_the_format_example_in_the_prompt_is_itself_a_valid_answer() -> None:
    text = prompt_for().text
    start = text.index(SEARCH_MARKER)
    end = text.index(">>>>>>> REPLACE") + len(">>>>>>> REPLACE")
    parsed = parse_answer(text[start:end])
    assert isinstance(parsed, ParsedAnswer)
    assert len(parsed.hunks) == 1


def test_gaps_are_sorted_by_ratio_to_the_best_largest_first() -> None:
    gaps = feedback_gaps(PARENT, BEST_CASES)
    assert [(case.key, ratio) for case, _, ratio in gaps] == [
        ("m=16", 3.0),
        ("m=256", 2.0),
        ("m=4096", 1.5),
        ("m=1", 1.0),
    ]
    assert all(best_case.key == case.key for case, best_case, _ in gaps)


def test_the_prompt_lists_gaps_in_order_with_both_costs_and_details() -> None:
    text = prompt_for().text
    lines = [line for line in text.splitlines() if line.startswith("- m=")]
    assert [line.split(":")[0] for line in lines] == ["- m=16", "- m=256", "- m=4096"]
    assert "current 30 (tile 64)" in lines[0] and "best 10 (best-of-m=16)" in lines[0]
    assert "3.00x" in lines[0]


def test_the_prompt_shows_at_most_max_feedback_cases() -> None:
    text = prompt_for(max_feedback_cases=2).text
    assert [line[:7] for line in text.splitlines() if line.startswith("- m=")] == [
        "- m=16:",
        "- m=256",
    ]
    assert "behind the best any program reached on 3 of 4 cases; the 2 furthest" in text


def test_cases_without_a_best_cost_or_with_nan_costs_are_left_out() -> None:
    parent = dataclasses.replace(
        PARENT, cases=(CaseResult("m=16", math.nan), CaseResult("unseen", 5.0))
    )
    assert feedback_gaps(parent, BEST_CASES) == []
    assert "furthest from the best" not in prompt_for(parent=parent).text


def test_a_zero_best_cost_makes_any_positive_cost_an_unbounded_gap() -> None:
    parent = dataclasses.replace(PARENT, cases=(CaseResult("k", 1.0), CaseResult("z", 0.0)))
    gaps = feedback_gaps(parent, {"k": best("k", 0.0), "z": best("z", 0.0)})
    assert [(case.key, ratio) for case, _, ratio in gaps] == [("k", math.inf), ("z", 1.0)]


def test_a_parent_that_is_best_everywhere_is_told_so() -> None:
    text = prompt_for(best_cases={"m=1": best("m=1", 10.0)}).text
    assert "matches the best cost seen on all 1 cases" in text


def test_the_same_seed_gives_the_same_prompt() -> None:
    for seed in range(10):
        first, second = prompt_for(seed), prompt_for(seed)
        assert (first.text, first.variant) == (second.text, second.variant)


def test_seeds_draw_every_task_phrasing_and_both_section_orders() -> None:
    prompts = [prompt_for(seed) for seed in range(60)]
    assert {p.variant for p in prompts} == {
        f"task{task}-{order}"
        for task in range(len(TASK_LINES))
        for order in ("parent-first", "inspirations-first")
    }
    for prompt in prompts:
        task = int(re.match(r"task(\d+)", prompt.variant).group(1))  # type: ignore[union-attr]
        assert TASK_LINES[task] in prompt.text
        parent_at = prompt.text.index("## Current program")
        inspirations_at = prompt.text.index("## Other programs")
        assert (parent_at < inspirations_at) == prompt.variant.endswith("parent-first")


def test_held_out_metrics_never_reach_the_prompt() -> None:
    assert not any("heldout" in field.name for field in dataclasses.fields(ProgramView))
    evaluation = Evaluation(
        program_id="p" * 32,
        job_id="job-1",
        status=ProgramStatus.EVALUATED,
        stages=(
            StageResult(
                stage="train",
                passed=True,
                score=1.25,
                metrics={"speedup": 1.25},
                heldout={"test_speedup": 0.123456, "test_oracle_gap": 7.654321},
            ),
        ),
    )
    view = ProgramView(
        id=evaluation.program_id,
        source=SOURCE,
        score=evaluation.score,
        metrics=evaluation.metrics,
        cases=evaluation.cases,
    )
    text = prompt_for(parent=view).text
    for leaked in ("test_speedup", "test_oracle_gap", "0.123456", "7.65432"):
        assert leaked not in text
    assert "speedup=1.25" in text


def test_an_unmarked_parent_is_not_told_about_evolve_blocks() -> None:
    parent = dataclasses.replace(PARENT, source="def f() -> int:\n    return 1\n")
    text = prompt_for(parent=parent).text
    assert EVOLVE_START not in text
    assert "Any part of the program may change" in text


def test_a_source_holding_backticks_gets_a_longer_fence() -> None:
    parent = dataclasses.replace(PARENT, source='DOC = """```python\nx\n```"""\n')
    assert '````python\nDOC = """```python' in prompt_for(parent=parent).text


def test_long_feedback_is_cut_and_an_error_keeps_its_tail() -> None:
    parent = dataclasses.replace(
        PARENT, feedback="start " + "f" * 5000, error="e" * 5000 + " final line"
    )
    text = prompt_for(parent=parent).text
    assert "start " in text and "f" * 5000 not in text
    assert "final line" in text and "e" * 5000 not in text


def test_a_negative_feedback_case_limit_is_refused() -> None:
    with pytest.raises(PromptSamplerError, match="max_feedback_cases"):
        prompt_for(max_feedback_cases=-1)


def test_a_parent_without_a_score_is_labelled_unscored() -> None:
    text = prompt_for(parent=dataclasses.replace(PARENT, score=None)).text
    assert "Score: none" in text


def test_an_unrendered_prompt_draws_the_same_and_names_the_same_variant() -> None:
    def build(render: bool, rng: np.random.Generator) -> Prompt:
        return build_prompt(
            job_id="job-1",
            problem="tiles",
            context=CONTEXT,
            proposal_index=7,
            island=2,
            parent=PARENT,
            inspirations=INSPIRATIONS,
            best_cases=BEST_CASES,
            rng=rng,
            render=render,
        )

    for seed in range(12):
        rendered_rng, bare_rng = np.random.default_rng(seed), np.random.default_rng(seed)
        rendered, bare = build(True, rendered_rng), build(False, bare_rng)
        assert rendered.text and bare.text == ""
        assert dataclasses.replace(bare, text=rendered.text) == rendered
        assert bare_rng.random() == rendered_rng.random()
