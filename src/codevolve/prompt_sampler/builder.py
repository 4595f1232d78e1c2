"""Rendering the prompt a proposer reads for one proposal.

The prompt holds, in this order unless a variant reorders the middle: the task and the problem's
context; the parent program with its score, metrics and evaluator feedback; the cases where the
parent is furthest from the best cost the job has seen (the signal directed edits act on); other
programs for inspiration; and exact instructions for the SEARCH/REPLACE answer format.

A few template variants (the phrasing of the task, the order of the middle sections) are drawn
from the injected generator, so that a run is reproducible from its seed, and recorded in
``Prompt.variant``. Given a :class:`~codevolve.prompt_sampler.variants.StyleSampler`, the prompt
also takes one of its named styles (SEARCH/REPLACE, focused, explore, or a full rewrite when the
editable code is short), and the variant is named ``"<style>:task<i>-<order>"``; without one the
prompt and the generator draws are exactly those of the plain template.

Only :class:`~codevolve.core.prompt.ProgramView` values are rendered; they carry no held-out
metrics, so none can reach a proposer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from codevolve.core.diff import Hunk
from codevolve.core.evolve_block import EVOLVE_END, EVOLVE_START, Layout, layout
from codevolve.core.program import CaseResult, Metrics
from codevolve.core.prompt import BestCase, ProgramView, Prompt
from codevolve.prompt_sampler.errors import PromptSamplerError
from codevolve.prompt_sampler.variants import (
    EXPLORE_ALONE,
    REWRITE_MAX_LINES,
    STYLE_ASKS,
    StyleSampler,
)

FeedbackGap = tuple[CaseResult, BestCase, float]  # (parent's case, best seen, parent cost / best)

MAX_FEEDBACK_CHARS = 2_000  # characters of evaluator feedback or error shown per program
FOCUSED_CASES = 3  # cases shown by the "focused" style

TASK_LINES = (
    "Improve the current program so that it scores higher.",
    "Propose one focused change to the current program that raises its score.",
    "Study where the current program falls short of the best results seen, then edit it to close "
    "the gap.",
)

# The middle sections, in the orders a variant may use.
_ORDERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("parent-first", ("parent", "gaps", "inspirations")),
    ("inspirations-first", ("inspirations", "parent", "gaps")),
)

_EXAMPLE = Hunk(
    search="    for item in items:\n        total = total + item",
    replace="    total = total + sum(items)",
)


def feedback_gaps(parent: ProgramView, best_cases: Mapping[str, BestCase]) -> list[FeedbackGap]:
    """Each of the parent's cases the job has a best cost for, furthest from that best first.

    The gap is parent cost / best cost (costs are lower-is-better, so 1.0 means the parent is the
    best seen). Ties are ordered by case key; cases with a NaN cost are left out.
    """
    gaps: list[FeedbackGap] = []
    for case in parent.cases:
        best = best_cases.get(case.key)
        if best is None or math.isnan(case.cost) or math.isnan(best.cost):
            continue
        gaps.append((case, best, _gap(case.cost, best.cost)))
    gaps.sort(key=lambda gap: (-gap[2], gap[0].key))
    return gaps


def _gap(cost: float, best: float) -> float:
    if best > 0:
        return cost / best
    return 1.0 if cost <= best else math.inf  # a zero best cost: any positive cost is unbounded


def build_prompt(
    *,
    job_id: str,
    problem: str,
    context: str,
    proposal_index: int,
    island: int,
    parent: ProgramView,
    inspirations: Sequence[ProgramView],
    best_cases: Mapping[str, BestCase],
    rng: np.random.Generator,
    max_feedback_cases: int = 8,
    styles: StyleSampler | None = None,
    render: bool = True,
    notes: str = "",
) -> Prompt:
    """The prompt for one proposal; equal generator states (and style statistics) give equal
    prompts. Without ``render`` the text is left empty (for a proposer that reads only the
    structured fields, when prompts are not stored); the generator draws and the variant are
    the same either way. ``notes`` is the problem's own section (its prompt_notes), shown
    after the middle sections."""
    if max_feedback_cases < 0:
        raise PromptSamplerError(f"max_feedback_cases must be >= 0, got {max_feedback_cases}")
    task_index = int(rng.integers(len(TASK_LINES)))
    order_name, order = _ORDERS[int(rng.integers(len(_ORDERS)))]
    editable = layout(parent.source) if render or styles is not None else None
    style = None
    if styles is not None and editable is not None:
        style = styles.choose(rng, rewrite_allowed=_short(editable))
    variant = f"task{task_index}-{order_name}"
    text = ""
    if editable is not None and render:
        task = TASK_LINES[task_index]
        if style:
            ask = EXPLORE_ALONE if style == "explore" and not inspirations else STYLE_ASKS[style]
            task = f"{task} {ask}".strip()
        limit = min(max_feedback_cases, FOCUSED_CASES) if style == "focused" else max_feedback_cases
        middle = {
            "parent": _parent_section(parent),
            "gaps": _gaps_section(feedback_gaps(parent, best_cases), limit=limit),
            "inspirations": _inspirations_section(inspirations),
        }
        sections = [
            f"# {problem}\n\n{task}",
            f"## Problem\n\n{context.strip()}",
            *(middle[name] for name in order),
            notes.strip(),
            _rewrite_section(editable) if style == "rewrite" else _format_section(editable),
        ]
        text = "\n\n".join(section for section in sections if section) + "\n"
    return Prompt(
        job_id=job_id,
        problem=problem,
        proposal_index=proposal_index,
        island=island,
        parent=parent,
        inspirations=tuple(inspirations),
        best_cases=dict(best_cases),
        context=context,
        text=text,
        variant=f"{style}:{variant}" if style else variant,
    )


def _short(editable: Layout) -> bool:
    """Whether the editable code is short enough to be rewritten whole."""
    lines = sum(text.count("\n") + 1 for text in editable.region_texts())
    return lines <= REWRITE_MAX_LINES


def _parent_section(parent: ProgramView) -> str:
    parts = [
        "## Current program",
        f"Score: {_score(parent.score)}. {_metrics(parent.metrics)}",
        fenced(parent.source),
    ]
    if parent.feedback.strip():
        parts.append("Evaluator feedback:\n" + _clip(parent.feedback, keep_tail=False))
    if parent.error:
        parts.append("Error:\n" + _clip(parent.error, keep_tail=True))
    if parent.stderr.strip():
        parts.append("Standard error (the tail):\n" + _clip(parent.stderr, keep_tail=True))
    return "\n\n".join(parts)


def _gaps_section(gaps: list[FeedbackGap], *, limit: int) -> str:
    if not gaps:
        return ""  # no cases, or no best costs yet: nothing to compare against
    behind = [gap for gap in gaps if gap[2] > 1.0]
    title = "## Cases where the current program is furthest from the best seen"
    if not behind:
        return (
            f"{title}\n\nThe current program matches the best cost seen on all {len(gaps)} cases."
        )
    shown = behind[:limit]
    lines = [
        title,
        "",
        f"Costs are lower-is-better. The current program is behind the best any program reached "
        f"on {len(behind)} of {len(gaps)} cases; the {len(shown)} furthest behind:",
    ]
    for case, best, ratio in shown:
        lines.append(
            f"- {case.key}: current {_cost(case.cost, case.detail)}; "
            f"best {_cost(best.cost, best.detail)}; {ratio:.2f}x the best"
        )
    return "\n".join(lines)


def _inspirations_section(inspirations: Sequence[ProgramView]) -> str:
    if not inspirations:
        return ""
    parts = ["## Other programs for inspiration"]
    for number, program in enumerate(inspirations, start=1):
        parts.append(
            f"### Program {number} (score {_score(program.score)})\n\n"
            f"{_metrics(program.metrics)}\n\n{fenced(program.source)}"
        )
    return "\n\n".join(parts)


def _format_section(editable: Layout) -> str:
    where = (
        f"- Edit only the lines between `{EVOLVE_START}` and `{EVOLVE_END}`. The marker lines and "
        "all code outside them are fixed; a block that touches them is rejected."
        if editable.marked
        else "- Any part of the program may change."
    )
    if not editable.marked:
        rewrite = "the complete program"
    elif len(editable.regions) == 1:
        rewrite = "the complete new code between the markers"
    else:
        rewrite = "the whole program, markers included and the code outside them unchanged"
    return "\n".join(
        [
            "## How to answer",
            "",
            "Answer with one or more SEARCH/REPLACE blocks in exactly this form:",
            "",
            _EXAMPLE.render(),
            "",
            "- The SEARCH text must appear exactly once in the current program, character for "
            "character, indentation included; add neighbouring lines if it would not be unique.",
            "- The REPLACE text takes its place. Blocks apply in order, each to the result of the "
            "one before.",
            where,
            f"- A full rewrite is also accepted: {rewrite} in a single ```python fenced block, "
            "with no SEARCH/REPLACE markers.",
            "- The result must be valid Python. Explain briefly, then give the blocks.",
        ]
    )


def _rewrite_section(editable: Layout) -> str:
    if not editable.marked:
        what = "the complete new program"
    elif len(editable.regions) == 1:
        what = (
            f"the complete new code between `{EVOLVE_START}` and `{EVOLVE_END}` (the marker lines "
            "and the code outside them are fixed and may be left out)"
        )
    else:
        what = "the whole program, markers included and the code outside them unchanged"
    return "\n".join(
        [
            "## How to answer",
            "",
            f"Answer with {what}, in a single ```python fenced block.",
            "",
            "- Write no SEARCH/REPLACE markers: the block replaces the editable code as a whole.",
            "- Keep every name the fixed code and the evaluator use, with the same signature.",
            "- The result must be valid Python. Explain briefly, then give the block.",
        ]
    )


def fenced(source: str) -> str:
    """``source`` in a python fence longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}python\n{source.rstrip()}\n{fence}"


def _score(score: float | None) -> str:
    return "none (did not pass every stage)" if score is None else f"{score:.6g}"


def _metrics(metrics: Metrics) -> str:
    if not metrics:
        return "Metrics: none."
    return "Metrics: " + ", ".join(f"{name}={value:.6g}" for name, value in sorted(metrics.items()))


def _cost(cost: float, detail: str) -> str:
    return f"{cost:.4g} ({detail})" if detail else f"{cost:.4g}"


def _clip(text: str, *, keep_tail: bool) -> str:
    """Long feedback cut to a bounded size; errors keep their tail, where a traceback ends."""
    text = text.strip()
    if len(text) <= MAX_FEEDBACK_CHARS:
        return text
    if keep_tail:
        return "[... truncated]\n" + text[-MAX_FEEDBACK_CHARS:]
    return text[:MAX_FEEDBACK_CHARS] + "\n[... truncated]"
