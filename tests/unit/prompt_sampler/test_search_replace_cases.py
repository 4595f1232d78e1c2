"""Example-based cases for parsing and applying SEARCH/REPLACE answers and full rewrites."""

from __future__ import annotations

import textwrap

import pytest

from codevolve.core.diff import Applied, ApplyFailure, ApplyFailureKind, ApplyOutcome, Diff, Hunk
from codevolve.core.evolve_block import layout
from codevolve.prompt_sampler.errors import PromptSamplerError
from codevolve.prompt_sampler.search_replace import ParsedAnswer, apply_answer, parse_answer

PARENT = '''"""A toy problem."""

LIMIT = 10


# EVOLVE-BLOCK-START
def score(x: int) -> int:
    if x < LIMIT:
        return x * 2
    return x
# EVOLVE-BLOCK-END


def main() -> int:
    return score(3)
'''

BLOCK = """\
def score(x: int) -> int:
    if x < LIMIT:
        return x * 2
    return x
"""


def block(search: str, replace: str) -> str:
    return Hunk(search, replace).render()


def applied(outcome: ApplyOutcome) -> Applied:
    assert isinstance(outcome, Applied), outcome
    return outcome


def failure(outcome: ApplyOutcome, kind: ApplyFailureKind) -> ApplyFailure:
    assert isinstance(outcome, ApplyFailure), outcome
    assert outcome.kind is kind, outcome
    return outcome


# --- well-formed answers --------------------------------------------------------------------------


def test_a_single_block_replaces_its_search_text_once() -> None:
    outcome = applied(apply_answer(PARENT, block("        return x * 2", "        return x * 3")))
    assert outcome.source == PARENT.replace("return x * 2", "return x * 3")
    assert not outcome.full_rewrite


def test_diff_text_is_the_canonical_rendering_of_the_parsed_blocks() -> None:
    answer = (
        "Some reasoning.\n```\n<<<<<<<<< SEARCH   \n    return x\n=====\n    return x + 1\n"
        ">>>>> REPLACE\n```"
    )
    outcome = applied(apply_answer(PARENT, answer))
    assert outcome.diff_text == Diff((Hunk("    return x", "    return x + 1"),)).render()


def test_several_blocks_apply_in_order_each_on_the_previous_result() -> None:
    answer = "\n\nThen:\n\n".join(
        [
            block("    if x < LIMIT:", "    if x <= LIMIT:"),
            block(
                "    if x <= LIMIT:\n        return x * 2", "    if x <= LIMIT:\n        return -x"
            ),
        ]
    )
    outcome = applied(apply_answer(PARENT, answer))
    assert "    if x <= LIMIT:\n        return -x\n" in outcome.source
    assert "x * 2" not in outcome.source


def test_crlf_answers_apply_like_lf_answers() -> None:
    lf = block("        return x * 2", "        return x * 3")
    crlf = lf.replace("\n", "\r\n")
    assert applied(apply_answer(PARENT, crlf)).source == applied(apply_answer(PARENT, lf)).source


@pytest.mark.parametrize("count", [5, 6, 7, 8, 9])
def test_markers_of_five_to_nine_characters_with_trailing_spaces_are_read(count: int) -> None:
    answer = (
        f"{'<' * count} SEARCH  \n    return x\n{'=' * count} \n    return x - 1\n"
        f"{'>' * count} REPLACE\t\n"
    )
    assert applied(apply_answer(PARENT, answer)).source == PARENT.replace(
        "    return x\n", "    return x - 1\n"
    )


def test_fences_written_inside_a_block_are_not_taken_as_code() -> None:
    answer = (
        "<<<<<<< SEARCH\n```python\n    return x\n```\n=======\n```python\n    return 0\n```\n"
        ">>>>>>> REPLACE"
    )
    parsed = parse_answer(answer)
    assert parsed == ParsedAnswer(hunks=(Hunk("    return x", "    return 0"),))


def test_a_divider_line_in_prose_outside_blocks_is_ignored() -> None:
    answer = "My change\n=======\n\n" + block("    return x", "    return 1")
    assert isinstance(apply_answer(PARENT, answer), Applied)


def test_an_empty_replace_deletes_the_search_text() -> None:
    answer = block("    if x < LIMIT:\n        return x * 2\n", "")
    outcome = applied(apply_answer(PARENT, answer))
    assert "LIMIT:" not in outcome.source.split("# EVOLVE-BLOCK-START")[1]


def test_an_unmarked_parent_is_editable_anywhere() -> None:
    parent = "LIMIT = 10\n\n\ndef f() -> int:\n    return LIMIT\n"
    outcome = applied(apply_answer(parent, block("LIMIT = 10", "LIMIT = 11")))
    assert outcome.source == parent.replace("10", "11")


def test_edits_apply_in_any_of_several_regions() -> None:
    parent = "A = 1\n# EVOLVE-BLOCK-START\nB = 2\n# EVOLVE-BLOCK-END\nC = 3\n"
    parent += "# EVOLVE-BLOCK-START\nD = 4\n# EVOLVE-BLOCK-END\n"
    outcome = applied(apply_answer(parent, block("D = 4", "D = 5")))
    assert outcome.source == parent.replace("D = 4", "D = 5")
    assert layout(parent).spans == (
        (parent.index("B = 2"), parent.index("B = 2") + len("B = 2\n")),
        (parent.index("D = 4"), parent.index("D = 4") + len("D = 4\n")),
    )


# --- whitespace-tolerant matching -----------------------------------------------------------------


def test_trailing_spaces_in_search_still_match() -> None:
    answer = block(
        "    if x < LIMIT:   \n        return x * 2  ", "    if x < LIMIT:\n        return 7"
    )
    outcome = applied(apply_answer(PARENT, answer))
    assert outcome.source == PARENT.replace("return x * 2", "return 7")


def test_a_dedented_search_matches_and_its_replace_is_reindented() -> None:
    search = "if x < LIMIT:\n    return x * 2"
    replace = "if x < LIMIT:\n    y = x + 1\n    return y"
    outcome = applied(apply_answer(PARENT, block(search, replace)))
    expected = "    if x < LIMIT:\n        y = x + 1\n        return y\n"
    assert outcome.source == PARENT.replace("    if x < LIMIT:\n        return x * 2\n", expected)


def test_an_over_indented_search_matches_and_its_replace_is_dedented() -> None:
    search = "            if x < LIMIT:\n                return x * 2"
    replace = "            if x > LIMIT:\n                return x * 2"
    outcome = applied(apply_answer(PARENT, block(search, replace)))
    assert outcome.source == PARENT.replace("if x < LIMIT", "if x > LIMIT")


# --- full rewrites --------------------------------------------------------------------------------


def test_a_fenced_function_alone_replaces_the_single_evolve_block() -> None:
    new_block = BLOCK.replace("x * 2", "x * 4")
    outcome = applied(apply_answer(PARENT, f"Here it is:\n```python\n{new_block}```\nEnjoy."))
    assert outcome.source == PARENT.replace(BLOCK, new_block)
    assert outcome.full_rewrite
    assert outcome.diff_text == new_block


def test_bare_code_is_a_full_rewrite() -> None:
    new_block = BLOCK.replace("return x\n", "return x + 100\n")
    outcome = applied(apply_answer(PARENT, new_block))
    assert outcome.source == PARENT.replace(BLOCK, new_block)


def test_the_longest_fenced_program_is_the_rewrite() -> None:
    new_block = BLOCK.replace("x * 2", "x * 5")
    answer = f"Before:\n```python\nx = 1\n```\nAfter:\n```python\n{new_block}```\n"
    assert applied(apply_answer(PARENT, answer)).source == PARENT.replace(BLOCK, new_block)


def test_a_whole_program_with_unchanged_fixed_code_is_a_rewrite_of_the_block() -> None:
    child = PARENT.replace("x * 2", "x * 6")
    answer = "```python\n" + child.replace("LIMIT = 10\n", "LIMIT = 10   \n") + "```"
    assert applied(apply_answer(PARENT, answer)).source == child


def test_a_rewrite_holding_only_the_marked_block_keeps_the_fixed_code() -> None:
    new_block = BLOCK.replace("x * 2", "x * 8")
    answer = f"```python\n# EVOLVE-BLOCK-START\n{new_block}# EVOLVE-BLOCK-END\n```"
    assert applied(apply_answer(PARENT, answer)).source == PARENT.replace(BLOCK, new_block)


def test_a_whole_program_without_markers_does_not_duplicate_the_fixed_code() -> None:
    new_block = BLOCK.replace("x * 2", "x * 9")
    without_markers = PARENT.replace(BLOCK, new_block).replace("# EVOLVE-BLOCK-START\n", "")
    without_markers = without_markers.replace("# EVOLVE-BLOCK-END\n", "")
    outcome = applied(apply_answer(PARENT, f"```python\n{without_markers}```"))
    assert outcome.source == PARENT.replace(BLOCK, new_block)


def test_a_rewrite_of_an_unmarked_parent_is_the_child() -> None:
    outcome = applied(apply_answer("x = 1\n", "```python\nx = 2\n```"))
    assert outcome.source == "x = 2\n"


# --- every failure kind ---------------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["", "   \n\t\r\n", "I found no improvement.", "```\n```"])
def test_an_answer_with_neither_blocks_nor_a_program_is_empty(answer: str) -> None:
    failure(apply_answer(PARENT, answer), ApplyFailureKind.EMPTY)


@pytest.mark.parametrize(
    ("answer", "index"),
    [
        ("<<<<<<< SEARCH\n    return x\n>>>>>>> REPLACE", 0),
        ("<<<<<<< SEARCH\n    return x\n=======\n    return 1\n", 0),
        ("    return x\n=======\n    return 1\n>>>>>>> REPLACE", 0),
        ("<<<<<<< SEARCH\n\n=======\n    return 1\n>>>>>>> REPLACE", 0),
        ("<<<<<<< SEARCH\na\n<<<<<<< SEARCH\nb\n=======\nc\n>>>>>>> REPLACE", 0),
        ("<<<<<<< SEARCH\na\n=======\nb\n=======\nc\n>>>>>>> REPLACE", 0),
        (block("    return x", "    return 1") + "\n<<<<<<< SEARCH\n    return 1\n", 1),
    ],
)
def test_markers_that_do_not_form_a_block_are_malformed(answer: str, index: int) -> None:
    outcome = failure(apply_answer(PARENT, answer), ApplyFailureKind.MALFORMED)
    assert outcome.hunk_index == index


def test_a_search_text_absent_from_the_parent_is_no_match_naming_the_block() -> None:
    answer = block("    return x", "    return 1") + "\n" + block("    return y", "    return 2")
    outcome = failure(apply_answer(PARENT, answer), ApplyFailureKind.NO_MATCH)
    assert outcome.hunk_index == 1


def test_a_search_whose_relative_indentation_differs_is_no_match() -> None:
    answer = block("if x < LIMIT:\nreturn x * 2", "if x < LIMIT:\nreturn 0")
    failure(apply_answer(PARENT, answer), ApplyFailureKind.NO_MATCH)


def test_a_search_text_occurring_twice_is_ambiguous() -> None:
    parent = "# EVOLVE-BLOCK-START\nx = 1\ny = 0\nx = 1\n# EVOLVE-BLOCK-END\n"
    outcome = failure(apply_answer(parent, block("x = 1", "x = 2")), ApplyFailureKind.AMBIGUOUS)
    assert outcome.hunk_index == 0


def test_a_search_text_matching_twice_only_when_whitespace_is_ignored_is_ambiguous() -> None:
    parent = "def f():\n    x = 1\n    return x\n\n\ndef g():\n        x = 1\n        return x\n"
    answer = block("x = 1  \nreturn x", "x = 2\nreturn x")
    failure(apply_answer(parent, answer), ApplyFailureKind.AMBIGUOUS)


@pytest.mark.parametrize(
    ("search", "replace"),
    [
        ("LIMIT = 10", "LIMIT = 20"),  # fixed code
        ("# EVOLVE-BLOCK-START\ndef score", "def score"),  # the START marker
        ("    return x\n# EVOLVE-BLOCK-END", "    return x\n# EVOLVE-BLOCK-END"),  # the END marker
        ("    return score(3)", "    return score(4)"),  # fixed code after the block
    ],
)
def test_a_search_reaching_outside_the_evolve_block_is_rejected(search: str, replace: str) -> None:
    outcome = failure(
        apply_answer(PARENT, block(search, replace)), ApplyFailureKind.OUTSIDE_EVOLVE_BLOCK
    )
    assert outcome.hunk_index == 0


def test_a_replace_that_adds_a_marker_line_is_rejected() -> None:
    answer = block("    return x", "    return x\n# EVOLVE-BLOCK-END\nx = 1\n# EVOLVE-BLOCK-START")
    failure(apply_answer(PARENT, answer), ApplyFailureKind.OUTSIDE_EVOLVE_BLOCK)


def test_a_replace_that_joins_the_end_marker_to_code_is_rejected() -> None:
    # The exact SEARCH text includes the newline before the END marker; dropping it would put the
    # marker on the same line as code.
    answer = "<<<<<<< SEARCH\n    return x\n\n=======\n    return x + 1\n>>>>>>> REPLACE"
    parsed = parse_answer(answer)
    assert isinstance(parsed, ParsedAnswer) and parsed.hunks[0].search == "    return x\n"
    failure(apply_answer(PARENT, answer), ApplyFailureKind.OUTSIDE_EVOLVE_BLOCK)


def test_a_parent_with_an_unclosed_start_marker_has_nothing_editable() -> None:
    parent = "# EVOLVE-BLOCK-START\nx = 1\n"
    failure(apply_answer(parent, block("x = 1", "x = 2")), ApplyFailureKind.OUTSIDE_EVOLVE_BLOCK)


def test_a_marked_rewrite_that_changes_fixed_code_is_rejected() -> None:
    child = PARENT.replace("x * 2", "x * 6").replace("LIMIT = 10", "LIMIT = 99")
    outcome = failure(
        apply_answer(PARENT, f"```python\n{child}```"), ApplyFailureKind.OUTSIDE_EVOLVE_BLOCK
    )
    assert outcome.hunk_index is None


def test_an_unmarked_rewrite_of_a_parent_with_two_regions_is_rejected() -> None:
    parent = "# EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-END\n# EVOLVE-BLOCK-START\ny = 1\n"
    parent += "# EVOLVE-BLOCK-END\n"
    failure(apply_answer(parent, "```python\nx = 2\n```"), ApplyFailureKind.OUTSIDE_EVOLVE_BLOCK)


def test_an_answer_that_changes_nothing_is_no_change() -> None:
    failure(apply_answer(PARENT, block("    return x", "    return x")), ApplyFailureKind.NO_CHANGE)
    failure(apply_answer(PARENT, f"```python\n{BLOCK}```"), ApplyFailureKind.NO_CHANGE)


def test_a_child_that_does_not_parse_is_a_syntax_error_with_its_line() -> None:
    outcome = failure(
        apply_answer(PARENT, block("        return x * 2", "        return x *")),
        ApplyFailureKind.SYNTAX_ERROR,
    )
    assert f"line {PARENT.splitlines().index('        return x * 2') + 1}" in outcome.message


def test_a_child_longer_than_the_limit_is_too_long() -> None:
    answer = block("    return x", "    return x" + " + 1" * 50)
    failure(
        apply_answer(PARENT, answer, max_code_length=len(PARENT) + 10), ApplyFailureKind.TOO_LONG
    )
    assert isinstance(apply_answer(PARENT, answer, max_code_length=len(PARENT) + 1000), Applied)


def test_a_rewrite_block_must_be_a_program_not_prose_in_a_fence() -> None:
    answer = textwrap.dedent(
        """\
        I would change the threshold:
        ```
        lower the limit for small inputs
        ```
        """
    )
    failure(apply_answer(PARENT, answer), ApplyFailureKind.EMPTY)


def test_a_parsed_answer_cannot_hold_both_hunks_and_a_rewrite() -> None:
    with pytest.raises(PromptSamplerError):
        ParsedAnswer(hunks=(Hunk("a", "b"),), rewrite="x = 1\n")
