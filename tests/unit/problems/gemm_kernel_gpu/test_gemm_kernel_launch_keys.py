"""The launch a kernel program takes per shape, read from its source: the same code and launch
give the same key, any change to what a shape runs gives another, and programs outside the
readable form give none (they are measured)."""

from __future__ import annotations

import ast

import pytest

from codevolve.problems.gemm_kernel_gpu.kernel_source import (
    REGIME_TESTS,
    VARIANTS,
    add_rule,
    apply_hunks,
    initial_program,
)
from codevolve.problems.gemm_kernel_gpu.launches import launch_keys
from codevolve.problems.gemm_tiling.shapes import train_shapes

GRID_M = (1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)

INITIAL = initial_program()
SHAPES = [(s.m, s.n, s.k) for s in train_shapes()] + [(37, 384, 1056), (1, 1280, 8192)]
DISPATCH = "    return launch_tiled(x, w, y, choose_config(M, N, K))"


def _with_rule(source: str, regime: str, name: str, args: tuple[int, ...]) -> str:
    hunks = add_rule(source, REGIME_TESTS[regime], VARIANTS[name], args)
    assert hunks is not None
    return apply_hunks(source, hunks)


def _choose_config() -> object:
    """The initial program's choose_config, run (trusted test code, no triton needed)."""
    tree = ast.parse(INITIAL)
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    module = ast.Module(
        body=[n for n in wanted if n.name in ("GemmConfig", "choose_config")], type_ignores=[]
    )
    namespace: dict[str, object] = {}
    exec(compile(module, "<initial>", "exec"), namespace)
    return namespace["choose_config"]


def test_the_initial_programs_configs_read_as_python_computes_them() -> None:
    choose = _choose_config()
    keys = launch_keys(INITIAL, SHAPES)
    assert keys is not None and set(keys) == set(SHAPES)
    for shape, key in keys.items():
        config = choose(*shape)  # type: ignore[operator]
        assert key.launch == f"launch_tiled(x, w, y, GemmConfig{config})".replace(",)", ")")
        assert key.case == f"M={shape[0]} N={shape[1]} K={shape[2]}"
    assert len({k.kernel_hash for k in keys.values()}) == 1


def test_a_rule_changes_the_launch_of_its_shapes_only() -> None:
    child = _with_rule(INITIAL, "decode", "split_k", (16, 64, 128, 4, 4, 4))
    before, after = launch_keys(INITIAL, SHAPES), launch_keys(child, SHAPES)
    assert before is not None and after is not None
    changed = {shape for shape in SHAPES if before[shape] != after[shape]}
    assert changed == {shape for shape in SHAPES if shape[0] <= 16}
    assert all(after[s].launch.startswith("launch_split_k(") for s in changed)
    tiled_hash = before[SHAPES[-3]].kernel_hash
    assert {after[s].kernel_hash for s in SHAPES if s not in changed} == {tiled_hash}


def test_editing_a_kernel_changes_the_hash_of_the_launches_that_reach_it_only() -> None:
    child = _with_rule(INITIAL, "decode", "split_k", (16, 64, 128, 4, 4, 4))
    keys = launch_keys(child, SHAPES)
    edited_tiled = child.replace("acc = tl.dot(x, w, acc)", "acc += tl.dot(x, w)", 1)
    assert edited_tiled != child
    tiled = launch_keys(edited_tiled, SHAPES)
    assert keys is not None and tiled is not None
    for shape in SHAPES:
        same = shape[0] <= 16  # split-K's launch does not reach the tiled kernel
        assert (tiled[shape] == keys[shape]) is same, shape


def test_comments_and_layout_do_not_change_a_key() -> None:
    reformatted = INITIAL.replace(
        "    pid = tl.program_id(0)", "    # the tile\n    pid = tl.program_id( 0 )", 1
    )
    assert reformatted != INITIAL
    assert launch_keys(reformatted, SHAPES) == launch_keys(INITIAL, SHAPES)


def test_a_test_is_read_with_pythons_and_or_and_chained_comparisons() -> None:
    child = _with_rule(INITIAL, "mid", "persistent", (64, 128, 64, 4, 4, 8))
    child = child.replace("if M > 16 and M <= 512:", "if 16 < M <= 512 or N % 7 == 2 and K:", 1)
    keys = launch_keys(child, [(32, 4096, 4096), (16, 4096, 4096), (1, 8192, 1024)])
    assert keys is not None
    assert keys[(32, 4096, 4096)].launch.startswith("launch_persistent(")
    assert keys[(16, 4096, 4096)].launch.startswith("launch_tiled(")
    assert keys[(1, 8192, 1024)].launch.startswith("launch_persistent(")  # 8192 % 7 == 2


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "def matmul(x, w, y, workspace, num_sms):",
            "CACHE = {}\n\n\ndef matmul(x, w, y, workspace, num_sms):",
        ),
        (
            "def matmul(x, w, y, workspace, num_sms):",
            "print(1)\n\n\ndef matmul(x, w, y, workspace, num_sms):",
        ),
        ("    pid = tl.program_id(0)", "    global GemmConfig\n    pid = tl.program_id(0)"),
        (
            "def matmul(x, w, y, workspace, num_sms):",
            "def launch_tiled(*a):\n    pass\n\n\ndef matmul(x, w, y, workspace, num_sms):",
        ),
        (
            DISPATCH,
            "    if len(GRID) > M:\n        return launch_tiled(x, w, y, (16, 64, 64, 4, 4, 1))\n"
            + DISPATCH,
        ),
        (DISPATCH, "    y.zero_()\n" + DISPATCH),
        (DISPATCH, "    return launch_tiled(x, w, y, config=choose_config(M, N, K))"),
        (
            "    return GemmConfig(128, 128, 64, 4, 3, 8)",
            "    return GemmConfig(128, 128, 64, 4, 3, M)",
        ),
        ("    if M <= 256:\n", "    if M // (N - N) <= 256:\n"),
    ],
    ids=[
        "mutable-global",
        "module-statement",
        "global",
        "bound-twice",
        "test-calls",
        "extra-statement",
        "keyword-launch",
        "config-not-literal",
        "divides-by-zero",
    ],
)
def test_a_program_outside_the_readable_form_has_no_keys(old: str, new: str) -> None:
    assert INITIAL.count(old) >= 1, old
    changed = INITIAL.replace(old, new, 1)
    assert launch_keys(changed, SHAPES) is None


def test_every_grid_m_reads_on_the_initial_program() -> None:
    keys = launch_keys(INITIAL, [(m, 4096, 4096) for m in GRID_M])
    assert keys is not None and len(keys) == len(GRID_M)
