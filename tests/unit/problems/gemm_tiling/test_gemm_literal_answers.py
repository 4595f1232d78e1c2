"""The proof that lets a program skip the legality sweep: it can only answer its literal configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from codevolve.problems.gemm_tiling.literal_answers import only_literal_answers
from codevolve.problems.gemm_tiling.problem import gemm_tiling_problem

INITIAL = gemm_tiling_problem().initial_program
PRODUCT = " * ".join(["M"] * 34)  # up to 2**1054 for M below 2**31: past a float
FIRST_BRANCH = "    if M <= 32:\n"
KNOWN_GOOD = sorted(
    (Path(__file__).parents[4] / "data" / "gemm_tiling_gpu" / "programs").glob("*.py")
)


def _with_branch(branch: str) -> str:
    return INITIAL.replace(FIRST_BRANCH, branch + FIRST_BRANCH, 1)


def _at_module_level(code: str) -> str:
    return INITIAL.replace("# EVOLVE-BLOCK-END", code + "\n# EVOLVE-BLOCK-END")


def test_the_initial_program_can_only_answer_its_literals() -> None:
    assert only_literal_answers(INITIAL)


@pytest.mark.parametrize("path", KNOWN_GOOD, ids=lambda path: path.stem)
def test_evolved_rule_programs_can_only_answer_their_literals(path: Path) -> None:
    assert only_literal_answers(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "branch",
    [
        "    if M * N > 2097152 and M * N <= 8388608:\n        return (128, 256, 64, 8, 3, 8)\n",
        "    if M / N <= 4194304 or not K % 3:\n        return [64, 64, 128, 8, 4, 8]\n",
        "    if -M // 7 + 0.5 * K != N % 128:\n        pass\n",
        "    return GemmConfig(16, 64, 64, 1, 3, 1) if M < 2 else (16, 64, 64, 2, 3, 1)\n",
        '    """a docstring"""\n    if M < 8:\n        if N > 4096:\n'
        "            return GemmConfig(16, 128, 64, 4, 4, 1)\n    else:\n        pass\n",
    ],
)
def test_rules_of_arithmetic_tests_and_literal_returns_are_proven(branch: str) -> None:
    assert only_literal_answers(_with_branch(branch))


@pytest.mark.parametrize(
    "source",
    [
        _with_branch("    if M == 3:\n        return GemmConfig(M * 0 + 64, 64, 64, 4, 3, 8)\n"),
        _with_branch("    tile = 64\n"),
        _with_branch("    if M > 2 ** N:\n        return GemmConfig(64, 64, 64, 4, 3, 8)\n"),
        _with_branch("    if M << 3 > N:\n        return GemmConfig(64, 64, 64, 4, 3, 8)\n"),
        _with_branch("    if M // (N - K) > 1:\n        return GemmConfig(64, 64, 64, 4, 3, 8)\n"),
        _with_branch("    if M % 0 > 1:\n        return GemmConfig(64, 64, 64, 4, 3, 8)\n"),
        _with_branch("    if M < 'a':\n        return GemmConfig(64, 64, 64, 4, 3, 8)\n"),
        _with_branch("    if M in (1, 2):\n        return GemmConfig(64, 64, 64, 4, 3, 8)\n"),
        _with_branch("    if ~M > 3:\n        return GemmConfig(64, 64, 64, 4, 3, 8)\n"),
        _with_branch("    if len(str(M)) > 3:\n        return GemmConfig(64, 64, 64, 4, 3, 8)\n"),
        _with_branch("    if THRESHOLD < M:\n        return GemmConfig(64, 64, 64, 4, 3, 8)\n"),
        _with_branch(f"    if M * {1 << 999} / N > 1.5:\n        return (64, 64, 64, 4, 3, 8)\n"),
        _with_branch(f"    if {PRODUCT} / N > 1:\n        return (64, 64, 64, 4, 3, 8)\n"),
        _with_branch("    if M < 4:\n        return TABLE[M]\n"),
        _with_branch("    if M < 4:\n        return GemmConfig(*(64, 64, 64, 4, 3, 8))\n"),
        _with_branch("    if M < 4:\n        return GemmConfig(64, 64, 64, 4, 3, group_m=8)\n"),
        _with_branch("    while M > 4:\n        pass\n"),
        INITIAL.replace("    return GemmConfig(128, 128, 64, 4, 3, 8)\n", "    pass\n"),
        INITIAL.replace("def choose_config(M: int,", "def choose_config(GemmConfig: int,"),
        INITIAL.replace("def choose_config(M: int,", "@staticmethod\ndef choose_config(M: int,"),
        INITIAL.replace("K: int)", "K: int = 1)"),
        INITIAL.replace("K: int)", "K: int, *rest: int)"),
        INITIAL.replace(
            "from typing import NamedTuple", "from typing import NamedTuple\nimport os"
        ),
        INITIAL.replace("    group_m: int", "    group_m: int = 8"),
        INITIAL.replace("(NamedTuple):", "(NamedTuple, metaclass=type):"),
        _at_module_level("GemmConfig = lambda *values: (256, 256, 128, 4, 5, 8)\n"),
        _at_module_level("def GemmConfig(*values):\n    return (256, 256, 128, 4, 5, 8)\n"),
        _at_module_level("choose_config = print\n"),
        _at_module_level("def choose_config(M, N, K):\n    return (64, 64, 64, 4, 3, 8)\n"),
        _at_module_level("GemmConfig.__new__ = None\n"),
        "def choose_config(M, N, K):\n    return (64, 64, 64, 4, 3, 8)\n",  # no GemmConfig
        "this is not Python",
    ],
)
def test_anything_else_is_left_to_the_sweep(source: str) -> None:
    assert not only_literal_answers(source)


def test_a_test_nested_past_the_stack_is_left_to_the_sweep() -> None:
    deep = "(" * 150 + "M" + ")" * 150
    chain = " + ".join(["M"] * 20000)
    for test in (deep, chain):
        source = _with_branch(f"    if {test} > 3:\n        return (64, 64, 64, 4, 3, 8)\n")
        assert only_literal_answers(source) in (True, False)  # answers, never raises
    assert not only_literal_answers(_with_branch(f"    if {chain} > 3:\n        pass\n"))
