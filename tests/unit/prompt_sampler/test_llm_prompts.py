"""Prompt styles for the LLM proposer: named variants, the full-rewrite ask for short programs,
and the sampler that learns which styles succeed."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from codevolve.core.diff import Applied
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.prompt_sampler.builder import build_prompt
from codevolve.prompt_sampler.errors import PromptSamplerError
from codevolve.prompt_sampler.search_replace import apply_answer
from codevolve.prompt_sampler.variants import STYLES, StyleSampler, style_of

SHORT = """\
LIMIT = 10


# EVOLVE-BLOCK-START
def choose(m: int) -> int:
    return 64 if m < LIMIT else 128
# EVOLVE-BLOCK-END
"""
LONG = SHORT.replace(
    "    return 64", "\n".join(f"    x{i} = {i}" for i in range(80)) + "\n    return 64"
)


def prompt_for(source: str, seed: int, styles: StyleSampler | None) -> Prompt:
    return build_prompt(
        job_id="j",
        problem="toy",
        context="Pick a tile size.",
        proposal_index=0,
        island=0,
        parent=ProgramView(id="p", source=source, score=1.0),
        inspirations=(),
        best_cases={},
        rng=np.random.default_rng(seed),
        styles=styles,
    )


def test_without_styles_the_generator_draws_only_the_plain_templates_two_choices() -> None:
    """Simulated runs build prompts without styles: their random streams must not move."""
    used = np.random.default_rng(5)
    plain = build_prompt(
        job_id="j",
        problem="toy",
        context="Pick a tile size.",
        proposal_index=0,
        island=0,
        parent=ProgramView(id="p", source=SHORT, score=1.0),
        inspirations=(),
        best_cases={},
        rng=used,
    )
    reference = np.random.default_rng(5)
    reference.integers(3), reference.integers(2)  # the task line, the section order
    assert used.random() == reference.random()
    assert re.fullmatch(r"task\d-[a-z-]+", plain.variant)


def test_every_style_is_named_in_the_variant_and_rewrite_only_for_short_code() -> None:
    short = Counter(style_of(prompt_for(SHORT, s, StyleSampler()).variant) for s in range(200))
    long = Counter(style_of(prompt_for(LONG, s, StyleSampler()).variant) for s in range(200))
    assert set(short) == set(STYLES)
    assert set(long) == set(STYLES) - {"rewrite"}


def test_the_rewrite_style_asks_for_a_whole_block_that_applies() -> None:
    prompt = next(
        p
        for p in (prompt_for(SHORT, s, StyleSampler()) for s in range(50))
        if style_of(p.variant) == "rewrite"
    )
    assert "SEARCH/REPLACE markers" in prompt.text and "full rewrite" in prompt.text
    assert "<<<<<<< SEARCH" not in prompt.text  # no block example to copy
    answer = "Rewritten:\n```python\ndef choose(m: int) -> int:\n    return 32\n```\n"
    outcome = apply_answer(SHORT, answer)
    assert isinstance(outcome, Applied) and outcome.full_rewrite
    assert "LIMIT = 10" in outcome.source


def test_the_adaptive_sampler_favours_the_style_that_succeeds() -> None:
    sampler = StyleSampler(adaptive=True)
    for _ in range(30):
        sampler.record("focused:task0-parent-first", success=True)
        for style in ("diff", "explore", "rewrite"):
            sampler.record(f"{style}:task1-parent-first", success=False)
    sampler.record("unknown:task0", success=True)  # ignored
    rng = np.random.default_rng(0)
    chosen = Counter(sampler.choose(rng, rewrite_allowed=True) for _ in range(500))
    assert chosen["focused"] > 450
    assert sampler.stats["focused"].tries == 30


def test_a_uniform_sampler_tries_every_eligible_style() -> None:
    rng = np.random.default_rng(0)
    chosen = Counter(StyleSampler().choose(rng, rewrite_allowed=False) for _ in range(600))
    assert set(chosen) == {"diff", "focused", "explore"}
    assert min(chosen.values()) > 150


def test_unknown_styles_are_refused() -> None:
    with pytest.raises(PromptSamplerError):
        StyleSampler(("diff", "poetry"))


def test_the_tail_of_the_parents_stderr_is_shown() -> None:
    stderr = "start of the log\n" + "noise\n" * 1000 + "ValueError: the last line"
    prompt = build_prompt(
        job_id="j",
        problem="toy",
        context="Pick a tile size.",
        proposal_index=0,
        island=0,
        parent=ProgramView(id="p", source=SHORT, score=1.0, stderr=stderr),
        inspirations=(),
        best_cases={},
        rng=np.random.default_rng(0),
    )
    assert "Standard error (the tail):" in prompt.text
    assert "ValueError: the last line" in prompt.text and "start of the log" not in prompt.text


def test_the_explore_style_asks_to_borrow_only_when_other_programs_are_shown() -> None:
    alone = prompt_for(LONG, 0, StyleSampler(("explore",)))
    assert "other programs shown" not in alone.text and "different approach" in alone.text
    other = ProgramView(id="q", source=LONG.replace("64", "32"), score=0.5)
    shown = build_prompt(
        job_id="j",
        problem="toy",
        context="Pick a tile size.",
        proposal_index=0,
        island=0,
        parent=ProgramView(id="p", source=LONG, score=1.0),
        inspirations=(other,),
        best_cases={},
        rng=np.random.default_rng(0),
        styles=StyleSampler(("explore",)),
    )
    assert "borrow ideas from the other programs shown" in shown.text
    assert "## Other programs for inspiration" in shown.text
