"""The AST check of every literal GemmConfig in a candidate's source."""

from __future__ import annotations

from importlib import resources

import pytest

from codevolve.problems.gemm_tiling.shapes import GemmShape
from codevolve.problems.gemm_tiling.space import GemmConfig
from codevolve.problems.gemm_tiling.static_check import check_source, impure_answers

INITIAL = (
    resources.files("codevolve.problems.gemm_tiling")
    .joinpath("initial_program.py")
    .read_text(encoding="utf-8")
)
FIRST_BRANCH = "    if M <= 32:\n"


def _with_branch(branch: str) -> str:
    """The initial program with ``branch`` inserted before its first rule."""
    assert FIRST_BRANCH in INITIAL
    return INITIAL.replace(FIRST_BRANCH, branch + FIRST_BRANCH, 1)


def _line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def test_initial_program_passes() -> None:
    assert check_source(INITIAL) == ()


def test_an_illegal_literal_in_a_branch_train_never_reaches_is_caught_with_its_line() -> None:
    source = _with_branch("    if M == 3:\n        return GemmConfig(256, 256, 128, 4, 5, 8)\n")
    [issue] = check_source(source)
    assert issue.line == _line_of(source, "GemmConfig(256, 256, 128, 4, 5, 8)")
    assert "cannot launch" in issue.message
    assert "registers" in issue.message
    assert str(issue).startswith(f"line {issue.line}: GemmConfig(256, 256, 128, 4, 5, 8)")


def test_literals_outside_the_value_sets_are_caught_one_by_one() -> None:
    source = _with_branch("    if M == 5:\n        return GemmConfig(48, 64, 64, True, 3, 8.0)\n")
    messages = [issue.message for issue in check_source(source)]
    assert len(messages) == 3
    assert any("block_m=48" in m for m in messages)
    assert any("num_warps=True" in m for m in messages)
    assert any("group_m=8.0" in m for m in messages)


def test_keyword_arguments_are_checked_by_field_name() -> None:
    source = _with_branch(
        "    if M == 5:\n"
        "        return GemmConfig(64, 128, 64, 4, num_stages=5, group_m=8, colour=1)\n"
        "    if M == 6:\n"
        "        return GemmConfig(block_m=256, block_n=128, block_k=64, num_warps=4,\n"
        "                          num_stages=3, group_m=8)\n"
    )
    messages = [issue.message for issue in check_source(source)]
    assert any("no field colour" in m for m in messages)
    assert any("cannot launch" in m for m in messages)


def test_configs_in_helpers_and_tables_are_checked_too() -> None:
    source = INITIAL + "\nTABLE = {3: GemmConfig(16, 16, 64, 8, 3, 8)}\n"
    [issue] = check_source(source)
    assert "8 warps for a 16x16 tile" in issue.message


def test_computed_arguments_are_left_to_the_probe() -> None:
    source = _with_branch(
        "    if M == 5:\n        return GemmConfig(M * 256, 256, 128, 4, 5, 8)\n"
        "    if M == 6:\n        return GemmConfig(*PICK)\n"
    )
    assert check_source(source) == ()


def test_a_program_without_choose_config_fails() -> None:
    source = INITIAL.replace("def choose_config(", "def pick_config(")
    [issue] = check_source(source)
    assert "no top-level function choose_config()" in issue.message


def test_a_syntax_error_is_reported_with_its_line() -> None:
    [issue] = check_source("def choose_config(M, N, K):\n    return (\n")
    assert issue.message.startswith("syntax error")
    assert issue.line >= 2


def test_the_source_is_parsed_not_run() -> None:
    source = "raise SystemExit('ran')\n" + INITIAL
    assert check_source(source) == ()


@pytest.mark.parametrize(
    "branch",
    [
        "    if M == 3000:\n        return (256, 256, 128, 4, 5, 8)\n",
        "    if M == 3000:\n        return [256, 256, 128, 4, 5, 8]\n",
        "    return (256, 256, 128, 4, 5, 8) if M == 3000 else GemmConfig(32, 64, 64, 2, 3, 8)\n",
        "    if M == 3000:\n        return M > 1 and (256, 256, 128, 4, 5, 8)\n",
        "    return RARE.get(M, (256, 256, 128, 4, 5, 8))\n",
    ],
)
def test_a_plain_tuple_or_list_a_return_can_yield_is_checked_like_a_config(branch: str) -> None:
    source = _with_branch(branch) + "\nRARE = {}\n"
    [issue] = check_source(source)
    assert "(256, 256, 128, 4, 5, 8)" in issue.message or "[256, 256" in issue.message
    assert "cannot launch" in issue.message


@pytest.mark.parametrize(
    ("table", "use"),
    [
        ("RARE = {12345: (256, 256, 128, 4, 5, 8)}", "return GemmConfig(*RARE[M])"),
        ("RARE = [(64, 128, 64, 4, 3, 8), (256, 256, 128, 4, 5, 8)]", "return RARE[M % 2]"),
        (
            "PICKS: dict = {7: [256, 256, 128, 4, 5, 8]}",
            "return PICKS.get(M) or GemmConfig(*PICKS[7])",
        ),
    ],
)
def test_six_int_literals_in_a_table_that_a_return_reads_are_checked(table: str, use: str) -> None:
    source = _with_branch(f"    if M in (7, 12345, 5):\n        {use}\n") + f"\n{table}\n"
    issues = check_source(source)
    assert len(issues) == 1, issues
    assert "cannot launch" in issues[0].message
    assert issues[0].line == _line_of(source, table)


def test_six_int_sequences_that_no_return_reads_are_left_alone() -> None:
    source = INITIAL + "\nTHRESHOLDS = (1, 16, 32, 64, 128, 256)\nSIZES = [3, 5, 7, 9, 11, 13]\n"
    assert check_source(source) == ()


def test_answers_that_depend_on_more_than_the_shape_are_named() -> None:
    shape, other = GemmShape(16, 4096, 4096), GemmShape(32, 4096, 4096)
    first, second = GemmConfig(32, 64, 64, 2, 3, 8), GemmConfig(64, 64, 64, 4, 3, 8)
    assert impure_answers([shape, other, shape], [first, second, first]) is None
    reason = impure_answers([shape, other, shape], [first, first, second])
    assert reason is not None
    assert reason.startswith(
        "choose_config(16, 4096, 4096) answered GemmConfig(32, 64, 64, 2, 3, 8)"
    )
    assert "pure function of (M, N, K)" in reason
