"""Properties of applying SEARCH/REPLACE answers: round trips, robustness, failures, confinement."""

from __future__ import annotations

import ast
import textwrap

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from codevolve.core.diff import Applied, ApplyFailure, ApplyFailureKind, Diff, Hunk
from codevolve.core.evolve_block import EVOLVE_END, EVOLVE_START, layout
from codevolve.prompt_sampler.search_replace import apply_answer

PROPERTY = settings(max_examples=100, deadline=None)

NAMES = ("a", "b", "total", "x", "limit")
WORDS = ("here", "is", "the", "change", "it", "should", "help", "faster", "tile", "Note:")

statements = st.one_of(
    st.builds(lambda name, value: f"{name} = {value}", st.sampled_from(NAMES), st.integers(0, 9)),
    st.builds(lambda words: "# " + " ".join(words), st.lists(st.sampled_from(WORDS), min_size=1)),
)
prose = st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join)


def occurrences(text: str, needle: str) -> int:
    return sum(1 for at in range(len(text)) if text.startswith(needle, at))


def window_count(lines: list[str], window: list[str]) -> int:
    """How often ``window`` occurs as consecutive lines, up to trailing space and indentation."""
    wanted = textwrap.dedent("\n".join(line.rstrip() for line in window))
    size = len(window)
    return sum(
        1
        for first in range(len(lines) - size + 1)
        if textwrap.dedent("\n".join(line.rstrip() for line in lines[first : first + size]))
        == wanted
    )


@st.composite
def unique_spans(draw: st.DrawFn, lines: list[str]) -> tuple[int, int]:
    """Line indices ``[start, end)`` of a span that occurs once in ``lines``."""
    start = draw(st.integers(0, len(lines) - 1))
    end = draw(st.integers(start + 1, len(lines)))
    assume(window_count(lines, lines[start:end]) == 1)
    return start, end


# --- (a) round trip -------------------------------------------------------------------------------


@PROPERTY
@given(lines=st.lists(statements, min_size=1, max_size=12), data=st.data())
def test_a_rendered_hunk_of_a_unique_line_span_applies_as_that_splice(
    lines: list[str], data: st.DataObject
) -> None:
    parent = "\n".join(lines) + "\n"
    start, end = data.draw(unique_spans(lines))
    replace = "\n".join(data.draw(st.lists(statements, max_size=4)))
    expected = "\n".join([*lines[:start], replace, *lines[end:]]) + "\n"
    assume(expected != parent)

    outcome = apply_answer(parent, Hunk("\n".join(lines[start:end]), replace).render())

    assert isinstance(outcome, Applied), outcome
    assert outcome.source == expected


# --- (b) prose and fences around the blocks -------------------------------------------------------


@st.composite
def decorated(draw: st.DrawFn, diff: Diff) -> str:
    """``diff`` as a model might write it: prose, fences, marker lengths, spaces, CRLF."""
    fence = draw(st.sampled_from(["", "```", "```python", "```diff"]))
    pieces = [draw(prose)]
    for hunk in diff.hunks:
        text = hunk.render()
        for canonical, char in (("<<<<<<<", "<"), ("=======", "="), (">>>>>>>", ">")):
            marker = char * draw(st.integers(5, 9))
            text = text.replace(canonical, marker + " " * draw(st.integers(0, 1)), 1)
        text = "\n".join(
            line + " " * draw(st.integers(0, 2))
            if line.startswith(("<<<<<", "=====", ">>>>>"))
            else line
            for line in text.split("\n")
        )
        pieces.append(f"{fence}\n{text}\n```" if fence else text)
        pieces.append(draw(prose))
    answer = "\n\n".join(pieces)
    if draw(st.booleans()):
        answer = f"```\n{answer}\n```"
    return answer.replace("\n", "\r\n") if draw(st.booleans()) else answer


@PROPERTY
@given(lines=st.lists(statements, min_size=2, max_size=12), data=st.data())
def test_prose_and_fences_around_blocks_do_not_change_the_outcome(
    lines: list[str], data: st.DataObject
) -> None:
    parent = "\n".join(lines) + "\n"
    hunks = []
    for _ in range(data.draw(st.integers(1, 2))):
        start, end = data.draw(unique_spans(lines))
        replace = "\n".join(data.draw(st.lists(statements, min_size=1, max_size=3)))
        hunks.append(Hunk("\n".join(lines[start:end]), replace))
    diff = Diff(tuple(hunks))
    bare = apply_answer(parent, diff.render())
    assume(isinstance(bare, Applied))

    assert apply_answer(parent, data.draw(decorated(diff))) == bare


# --- (c) no match, ambiguous ----------------------------------------------------------------------


@PROPERTY
@given(
    lines=st.lists(statements, min_size=1, max_size=10),
    search=st.lists(statements, min_size=1, max_size=3),
    replace=statements,
)
def test_a_search_that_is_nowhere_in_the_parent_is_no_match(
    lines: list[str], search: list[str], replace: str
) -> None:
    parent = "\n".join(lines) + "\n"
    search_text = "\n".join(search)
    assume(occurrences(parent, search_text) == 0 and window_count(lines, search) == 0)

    outcome = apply_answer(parent, Hunk(search_text, replace).render())

    assert isinstance(outcome, ApplyFailure)
    assert (outcome.kind, outcome.hunk_index) == (ApplyFailureKind.NO_MATCH, 0)


@PROPERTY
@given(
    parts=st.lists(st.lists(statements, max_size=3), min_size=3, max_size=3),
    repeated=st.lists(statements, min_size=1, max_size=3),
    replace=statements,
)
def test_a_search_that_occurs_twice_is_ambiguous(
    parts: list[list[str]], repeated: list[str], replace: str
) -> None:
    before, between, after = parts
    parent = "\n".join([*before, *repeated, *between, *repeated, *after]) + "\n"

    outcome = apply_answer(parent, Hunk("\n".join(repeated), replace).render())

    assert isinstance(outcome, ApplyFailure)
    assert (outcome.kind, outcome.hunk_index) == (ApplyFailureKind.AMBIGUOUS, 0)


# --- (d) confinement to the EVOLVE block ----------------------------------------------------------


@PROPERTY
@given(
    prefix=st.lists(statements, max_size=4),
    region=st.lists(statements, min_size=1, max_size=5),
    suffix=st.lists(statements, max_size=4),
    replace=st.lists(statements, min_size=1, max_size=3),
    data=st.data(),
)
def test_edits_touching_fixed_code_fail_and_edits_inside_never_change_it(
    prefix: list[str],
    region: list[str],
    suffix: list[str],
    replace: list[str],
    data: st.DataObject,
) -> None:
    lines = [*prefix, EVOLVE_START, *region, EVOLVE_END, *suffix]
    parent = "\n".join(lines) + "\n"
    start, end = data.draw(unique_spans(lines))
    inside = len(prefix) < start and end <= len(prefix) + 1 + len(region)

    outcome = apply_answer(parent, Hunk("\n".join(lines[start:end]), "\n".join(replace)).render())

    if not inside:
        assert isinstance(outcome, ApplyFailure)
        assert outcome.kind is ApplyFailureKind.OUTSIDE_EVOLVE_BLOCK
    elif isinstance(outcome, Applied):
        assert layout(outcome.source).fixed_parts() == layout(parent).fixed_parts()
    else:
        assert outcome.kind is ApplyFailureKind.NO_CHANGE


# --- (e) whitespace-tolerant matching -------------------------------------------------------------


@st.composite
def function_bodies(draw: st.DrawFn) -> list[str]:
    """Lines of a function body: statements at one indent and if-blocks nesting one more."""
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            lines.append(f"    if {draw(st.sampled_from(NAMES))} > {draw(st.integers(0, 9))}:")
            lines.append("        " + draw(statements))
        else:
            lines.append("    " + draw(statements))
    return lines


@PROPERTY
@given(body=function_bodies(), data=st.data())
def test_a_search_with_shifted_indent_and_trailing_spaces_edits_the_right_place(
    body: list[str], data: st.DataObject
) -> None:
    lines = ["def f(a, b, total, x, limit):", *body, "    return a"]
    parent = "\n".join(lines) + "\n"
    start, end = data.draw(unique_spans(lines[1:-1]))
    start, end = start + 1, end + 1
    margin = min(len(line) - len(line.lstrip()) for line in lines[start:end])
    shift = data.draw(st.sampled_from([-margin, -4, 0, 4, 8]))
    search = [
        " " * (len(line) - len(line.lstrip()) + shift)
        + line.strip()
        + " " * data.draw(st.integers(0, 2))
        for line in lines[start:end]
    ]
    assume(occurrences(parent, "\n".join(search)) == 0)
    new = data.draw(st.lists(statements, min_size=1, max_size=3))
    replace = "\n".join(" " * (margin + shift) + line for line in new)
    expected = "\n".join([*lines[:start], *(" " * margin + line for line in new), *lines[end:]])
    expected += "\n"
    assume(expected != parent)

    outcome = apply_answer(parent, Hunk("\n".join(search), replace).render())

    if parses(expected):
        assert isinstance(outcome, Applied), outcome
        assert outcome.source == expected
    else:  # the span ended an if-block's body: the splice is right, the child is not Python
        assert isinstance(outcome, ApplyFailure)
        assert outcome.kind is ApplyFailureKind.SYNTAX_ERROR


def parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True
