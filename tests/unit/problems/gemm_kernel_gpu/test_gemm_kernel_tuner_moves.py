"""The tuner's craft as moves: the shape-feature model, the launch families, rules on shape
features, recombination guided by measurements, and the per-bucket table in the prompt."""

from __future__ import annotations

import ast
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codevolve.core.program import CaseResult
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.problems.gemm_kernel_gpu.kernel_source import (
    VARIANTS,
    add_rule,
    apply_hunks,
    initial_program,
)
from codevolve.problems.gemm_kernel_gpu.launches import launch_keys
from codevolve.problems.gemm_kernel_gpu.mutations import kernel_mutations
from codevolve.problems.gemm_kernel_gpu.problem import gemm_kernel_gpu_problem
from codevolve.problems.gemm_kernel_gpu.recombination import launch_of, ranked
from codevolve.problems.gemm_kernel_gpu.shape_features import (
    SMS_METRIC,
    Bucket,
    Launch,
    Shape,
    bucket_of,
    max_stages,
    shared_bytes,
    sms_of,
    tiles,
    waves,
)
from codevolve.problems.gemm_kernel_gpu.stages import full_stage
from codevolve.problems.gemm_kernel_gpu.static_check import check_source
from codevolve.problems.gemm_kernel_gpu.tuner_moves import family_launches
from codevolve.problems.gemm_tiling.catalogue import CATALOGUE
from codevolve.problems.gemm_tiling.shapes import tiling_split
from codevolve.prompt_sampler.builder import build_prompt
from codevolve.prompt_sampler.search_replace import apply_answer

INITIAL = initial_program()
TRAIN: list[Shape] = [(s.m, s.n, s.k) for s in tiling_split().train]
MOVES = {m.kind: m for m in kernel_mutations()}
PAIRS = {(p.n, p.k) for p in CATALOGUE}
ALL_BUCKETS = [Bucket(r, b, long_k) for r in range(4) for b in range(3) for long_k in (False, True)]


def _view(source: str, ratios: dict[Shape, float], *, name: str = "p", sms: int = 0) -> ProgramView:
    cases = tuple(
        CaseResult(key=f"gpu M={m} N={n} K={k}", cost=10.0 / r, detail=f"{r:.3f}")
        for (m, n, k), r in ratios.items()
    )
    metrics = {SMS_METRIC: float(sms)} if sms else {}
    return ProgramView(id=name, source=source, score=0.9, metrics=metrics, cases=cases)


def _prompt(parent: ProgramView, inspirations: Sequence[ProgramView] = ()) -> Prompt:
    return Prompt(
        job_id="job",
        problem="gemm-kernel-gpu",
        proposal_index=0,
        island=0,
        parent=parent,
        inspirations=tuple(inspirations),
        best_cases={},
        context="",
        text="",
    )


def _ratios(seed: int) -> dict[Shape, float]:
    rng = np.random.default_rng(seed)
    return {s: float(rng.uniform(0.5, 1.3)) for s in TRAIN}


def _launches(source: str, shapes: Sequence[Shape]) -> dict[Shape, Launch | None]:
    keys = launch_keys(source, shapes)
    assert keys is not None, "the program's launches cannot be read"
    return {shape: launch_of(key.launch) for shape, key in keys.items()}


def _with_rule(source: str, test: str, launch: Launch) -> str:
    hunks = add_rule(source, test, VARIANTS[launch.variant], launch.args)
    assert hunks is not None
    return apply_hunks(source, hunks)


# --------------------------------------------------------------------- the feature model


def test_the_feature_model_counts_tiles_waves_and_the_deepest_pipeline_that_fits() -> None:
    tma = Launch("tma", (128, 128, 64, 4, 3, 8))
    assert tiles(tma, (8192, 28672, 4096)) == 64 * 224
    assert waves(tma, (1024, 1280, 8192)) == 1  # 80 tiles: one partial wave
    # 128x128x64 stages are 32 KiB: 7 fit in 227 KiB; a persistent kernel keeps its 32 KiB
    # output tile beside them (6); 128x256 ones 3 (4 would ask 262,144 bytes).
    assert max_stages(tma) == 7
    assert max_stages(Launch("tma_persistent", (128, 128, 64, 4, 3, 8, 1))) == 6
    wide = Launch("tma_persistent", (128, 256, 64, 8, 4, 8, 1))
    assert shared_bytes(wide) == 262_144 and max_stages(wide) == 3
    split = Launch("split_k", (16, 64, 128, 4, 4, 4))
    assert tiles(split, (16, 4096, 4096)) * split.split == 256
    assert max_stages(Launch("tma_wide", (128, 128, 64, 4, 4, 8, 32))) == 6  # 160 wide


def _membership_program(test: str) -> str:
    return "\n".join(
        [
            "def launch_plain(x, w, y, workspace, num_sms, a, b, c, d, e, f):",
            "    return a",
            "def launch_tiled(x, w, y, workspace, num_sms):",
            "    return 0",
            "def matmul(x, w, y, workspace, num_sms):",
            "    M, K = x.shape",
            "    N = w.shape[0]",
            f"    if {test}:",
            "        return launch_plain(x, w, y, workspace, num_sms, 1, 1, 1, 1, 1, 1)",
            "    return launch_tiled(x, w, y, workspace, num_sms)",
            "",
        ]
    )


SHAPES = st.tuples(st.integers(1, 20_000), st.integers(16, 70_000), st.integers(16, 70_000)).map(
    lambda s: (int(s[0]), int(s[1]), int(s[2]))
)


def _edges(sms: int) -> list[Shape]:
    """Shapes whose regime's usual tiles number one less than, or exactly, a band's edge, at
    each regime's lowest and highest M, K on both sides of the long-K edge."""
    shapes = []
    usual = ((1, 16, 64), (16, 16, 64), (17, 64, 128), (128, 64, 128), (129, 128, 128))
    for m, rows, width in (*usual, (1023, 128, 128), (1024, 128, 128), (8192, 128, 128)):
        rows_of_tiles = -(-m // rows)
        for count in (sms - 1, sms, 4 * sms - 1, 4 * sms):
            if count % rows_of_tiles == 0:
                n = width * count // rows_of_tiles
                shapes += [(m, n, k) for k in (4096, 4097)]
    return shapes


@pytest.mark.parametrize("sms", [132, 114])
def test_shapes_on_the_band_edges_pass_exactly_their_own_buckets_test(sms: int) -> None:
    _assert_in_own_bucket_only(_edges(sms), sms)


@settings(max_examples=40, deadline=None)
@given(shapes=st.lists(SHAPES, min_size=1, max_size=30), sms=st.sampled_from([132, 114, 78]))
def test_every_shape_passes_exactly_its_own_buckets_test(shapes: list[Shape], sms: int) -> None:
    _assert_in_own_bucket_only(shapes, sms)


def _assert_in_own_bucket_only(shapes: list[Shape], sms: int) -> None:
    """Each shape passes the test of :func:`bucket_of`'s bucket and no other, as launches.py
    reads the tests."""
    members = {}
    for bucket in ALL_BUCKETS:
        keys = launch_keys(_membership_program(bucket.test(sms)), shapes)
        assert keys is not None, bucket.test(sms)
        members[bucket] = {s for s, key in keys.items() if key.launch.startswith("launch_plain")}
    for shape in shapes:
        holding = [b for b in ALL_BUCKETS if shape in members[b]]
        assert holding == [bucket_of(shape, sms)], shape


# ---------------------------------------------------------------------------- the moves


def _check_child(parent: str, answer: str | None) -> str:
    assert answer is not None
    applied = apply_answer(parent, answer)
    assert hasattr(applied, "source"), applied
    child: str = applied.source
    assert check_source(child) == "", check_source(child)
    assert launch_keys(child, TRAIN) is not None
    return child


@pytest.mark.parametrize("kind", ["launch_family", "feature_rule", "recombine", "add_variant"])
def test_each_tuner_move_makes_children_that_apply_pass_the_static_check_and_read(
    kind: str,
) -> None:
    population = [INITIAL]
    made = 0
    for seed in range(12):
        rng = np.random.default_rng(seed)
        parent = population[int(rng.integers(len(population)))]
        # every program has rules to rewrite and measurements to recombine
        parent_view = _view(parent, _ratios(seed))
        inspirations = [_view(p, _ratios(100 + i)) for i, p in enumerate(population[-3:])]
        answer = MOVES["launch_family"].propose(_prompt(parent_view, inspirations), rng)
        parent = _check_child(parent, answer) if kind != "launch_family" else parent
        parent_view = _view(parent, _ratios(seed))
        answer = MOVES[kind].propose(_prompt(parent_view, inspirations), rng)
        if answer is None:
            continue
        population.append(_check_child(parent, answer))
        made += 1
    assert made >= 8, made


@pytest.mark.parametrize("shape", [(1, 1280, 8192), (64, 4096, 14336), (768, 1280, 8192)])
def test_launch_families_follow_the_shapes_features(shape: Shape) -> None:
    proposed = {p.family: p for p in family_launches(shape, 132)}
    assert "deep" in proposed
    for p in proposed.values():
        assert max_stages(p.launch) == p.launch.stages  # every pipeline fills shared memory
    if shape[0] <= 16:  # 20 tiles of 16x64: split K until the pieces fill one wave
        split = proposed["split_k"].launch
        pieces = tiles(split, shape) * split.split
        assert 66 <= pieces <= 132 and shape[2] // split.split >= 4 * split.block_k
    if shape == (768, 1280, 8192):
        wide = proposed["wide"].launch  # 60 tiles of 128x128; wider tiles waste no less
        assert waves(wide, shape) == 1 and wide.width >= 128


def test_persistent_and_stream_k_where_the_tiles_call_for_them() -> None:
    many = {p.family for p in family_launches((8192, 28672, 4096), 132)}
    assert "persistent" in many and "split_k" not in many
    # 8 x 22 = 176 tiles: one full wave and 44 in the last
    few = {p.family for p in family_launches((1024, 2816, 2048), 132)}
    assert "stream_k" in few


def test_the_device_sm_count_goes_into_the_rules() -> None:
    view = _view(INITIAL, {(1, 4096, 4096): 0.9}, sms=114)
    assert sms_of(view) == 114 and sms_of(_view(INITIAL, {})) == 132
    tests = [p.test for p in family_launches((1, 4096, 4096), 114)]
    assert all("114" in t for t in tests)


def _rule_tests(source: str) -> list[ast.expr]:
    tree = ast.parse(source)
    matmul = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "matmul")
    return [s.test for s in matmul.body if isinstance(s, ast.If)]


def _exact_compares(test: ast.expr) -> list[str]:
    """N or K compared with ``==`` to a literal (an (N, K) pair rule)."""
    return [
        ast.unparse(node)
        for node in ast.walk(test)
        if isinstance(node, ast.Compare)
        and any(isinstance(op, ast.Eq) for op in node.ops)
        and any(isinstance(x, ast.Name) and x.id in "NK" for x in [node.left, *node.comparators])
    ]


def test_feature_rules_replace_exact_pairs_and_no_move_writes_one() -> None:
    paired = _with_rule(
        INITIAL, "M <= 16 and N == 6144 and K == 4096", Launch("split_k", (16, 64, 128, 4, 4, 4))
    )
    rewritten = 0
    for seed in range(30):
        rng = np.random.default_rng(seed)
        kind = ("feature_rule", "launch_family", "add_variant", "recombine")[seed % 4]
        view = _view(paired, _ratios(seed))
        answer = MOVES[kind].propose(_prompt(view, [_view(INITIAL, _ratios(7))]), rng)
        if answer is None:
            continue
        child = _check_child(paired, answer)
        tests = _rule_tests(child)
        old = {ast.unparse(u) for u in _rule_tests(paired)}
        new = [t for t in tests if ast.unparse(t) not in old]
        assert new, kind
        for test in new:
            assert not _exact_compares(test), (kind, ast.unparse(test))
            numbers = {n.value for n in ast.walk(test) if isinstance(n, ast.Constant)}
            assert not any({n, k} <= numbers for n, k in PAIRS if n != k and n > 512), (
                kind,
                ast.unparse(test),
            )
        if kind in ("feature_rule", "recombine"):
            assert not any(_exact_compares(t) for t in tests), (kind, child)
            rewritten += 1
    assert rewritten >= 10


def test_a_variant_added_beside_another_keeps_the_program_readable() -> None:
    source = _with_rule(INITIAL, "M >= 1024", Launch("tma", (128, 128, 64, 4, 4, 8)))
    source = _with_rule(source, "M >= 2048", Launch("tma_wide", (128, 128, 64, 4, 4, 8, 32)))
    assert source.count("from triton.tools.tensor_descriptor import TensorDescriptor") == 1
    assert check_source(source) == "" and launch_keys(source, TRAIN) is not None


# ---------------------------------------------------------------------- recombination

DECODE = Launch("split_k", (16, 64, 128, 4, 4, 4))
PREFILL = Launch("tma_persistent", (128, 256, 64, 8, 3, 8, 1))


def test_recombination_routes_each_bucket_to_the_best_launch_measured_there() -> None:
    parent = _with_rule(INITIAL, "M <= 16", DECODE)
    other = _with_rule(INITIAL, "M >= 1024", PREFILL)
    # the parent's split-K beats the other's tiled decode; the other's persistent prefill
    # beats the parent's tiled prefill; elsewhere both run the same tiled configs
    parent_ratios = {s: (1.1 if s[0] <= 16 else 0.7 if s[0] >= 1024 else 0.9) for s in TRAIN}
    other_ratios = {s: (0.8 if s[0] <= 16 else 0.95 if s[0] >= 1024 else 0.9) for s in TRAIN}
    prompt = _prompt(_view(parent, parent_ratios), [_view(other, other_ratios, name="o")])
    child = _check_child(parent, MOVES["recombine"].propose(prompt, np.random.default_rng(0)))
    routed = _launches(child, TRAIN)
    for shape in TRAIN:
        if shape[0] <= 16:
            assert routed[shape] == DECODE, shape
        elif shape[0] >= 1024:
            assert routed[shape] == PREFILL, shape
    assert all("N ==" not in ast.unparse(t) for t in _rule_tests(child))


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    shapes=st.lists(st.sampled_from(TRAIN), min_size=1, max_size=40, unique=True),
)
def test_recombination_covers_every_measured_bucket_with_its_best(
    seed: int, shapes: list[Shape]
) -> None:
    rng = np.random.default_rng(seed)
    programs = [
        INITIAL,
        _with_rule(INITIAL, "M <= 16", DECODE),
        _with_rule(INITIAL, "M >= 128", PREFILL),
    ]
    views = [
        _view(p, {s: float(rng.uniform(0.4, 1.4)) for s in shapes}, name=str(i))
        for i, p in enumerate(programs)
    ]
    parent = views[int(rng.integers(3))]
    prompt = _prompt(parent, [v for v in views if v is not parent])
    table = ranked([parent, *prompt.inspirations], 132)
    answer = MOVES["recombine"].propose(prompt, rng)
    if answer is None:  # the parent already routes every bucket to its best
        routed = _launches(parent.source, shapes)
    else:
        routed = _launches(_check_child(parent.source, answer), shapes)
    for shape in shapes:
        best = table[bucket_of(shape)]
        assert routed[shape] == best[0].launch, shape
        assert best[0].ratio == max(c.ratio for c in best)


# ------------------------------------------------------------------------- the prompt


def test_the_prompt_shows_the_best_measured_launch_per_bucket() -> None:
    parent = _view(_with_rule(INITIAL, "M <= 16", DECODE), {(1, 4096, 4096): 1.05})
    other = _view(INITIAL, {(1, 4096, 4096): 0.8, (4096, 4096, 4096): 0.9}, name="o")
    notes = gemm_kernel_gpu_problem().prompt_notes(parent, [other])
    prompt = build_prompt(
        job_id="job",
        problem="gemm-kernel-gpu",
        context="ctx",
        proposal_index=0,
        island=0,
        parent=parent,
        inspirations=[other],
        best_cases={},
        rng=np.random.default_rng(0),
        notes=notes,
    )
    assert "## Best measured launch per shape-feature bucket" in prompt.text
    decode = bucket_of((1, 4096, 4096))
    assert f"`if {decode.test()}:`" in prompt.text
    assert f"best `{DECODE.call}`: 1.050 over 1 shape (the current program)" in prompt.text
    assert "launch_plain(x, w, y, workspace, num_sms, 128, 128, 64, 4, 3, 8)" in prompt.text
    assert gemm_kernel_gpu_problem().prompt_notes(_view(INITIAL, {}), []) == ""


def test_the_gpu_stage_records_the_devices_sm_count() -> None:
    stage = full_stage()
    rows = [
        {"status": "ok", "t_us": 10.0, "cublas_us": 9.0, "detail": "", "samples": 10}
        for _ in stage.shapes
    ]
    value = {"timings": rows, "device": {"name": "NVIDIA H100", "sms": 132}}
    result = stage.judge(value, device_index=0)
    assert result.metrics[SMS_METRIC] == 132.0
    view = ProgramView(id="p", source=INITIAL, score=0.9, metrics=result.metrics)
    assert sms_of(view) == 132
