"""bench/gpu_kernel_tune.py's choices, without a GPU: the wave count of a launch, the wave model's
choice for an unmeasured M, and the dispatch rules composed from a sweep report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.bench_modules import load_bench


@pytest.fixture(scope="module")
def tune() -> Any:
    return load_bench("gpu_kernel_tune")


PLAIN = ("plain", (128, 128, 64, 4, 4, 8))
WIDE = ("tma_persistent", (128, 256, 64, 8, 3, 8, 1))


def test_waves_count_whole_tiles_over_the_sms(tune: Any) -> None:
    assert tune.waves(PLAIN, 1024, 1280, 8192) == 1  # 80 tiles
    assert tune.waves(PLAIN, 2048, 1280, 8192) == 2  # 160 tiles: a partial second wave
    # tma_wide's tiles are block_n + extra_n wide: 8B.qkv M=256 in 2 x 64 tiles of 128 x 96
    assert tune.waves(("tma_wide", (128, 64, 64, 4, 4, 8, 32)), 256, 6144, 4096) == 1
    assert tune.waves(("tma", (128, 64, 64, 4, 4, 8)), 256, 6144, 4096) == 2  # 2 x 96 tiles
    # and tma_persistent_wide's (extra_n after flatten): 8B.qkv M=3072 in 768 tiles of 128 x 192
    wide = ("tma_persistent_wide", (128, 128, 64, 8, 4, 8, 1, 64))
    assert tune.waves(wide, 3072, 6144, 4096) == 6
    # 80 pieces in one round of a quarter tile, then 20 tiles' four partials summed
    split_k = tune.waves(("split_k", (64, 64, 128, 4, 4, 4)), 64, 1280, 8192)
    assert split_k == 0.25 + tune.reduction_waves(20, 4, 8192)
    # tma_wide_split (extra_n after split_k): 70B_tp8.qkv M=1024 in 4 x 8 tiles of 256 x 160,
    # split four ways: 128 pieces in one round of a quarter tile, then 32 tiles' partials summed
    wide_split = tune.waves(("tma_wide_split", (256, 128, 64, 8, 3, 8, 4, 32)), 1024, 1280, 8192)
    assert wide_split == 0.25 + tune.reduction_waves(32, 4, 8192)
    # 160 tiles: 132 whole, 28 split so that the tail costs well under a whole wave
    tail = tune.waves(("tail_split", (128, 128, 64, 4, 4, 8)), 2048, 1280, 8192)
    assert 1.1 < tail < 1.5


def test_splitting_every_tile_pays_for_summing_them(tune: Any) -> None:
    # 70B_tp8.qkv M=2048 in 128x256 tiles: all 80 in the last wave, split three ways (240
    # pieces, two rounds of a third of a tile), and 240 fp32 partial tiles written and read back.
    wide = tune.waves(("tail_split", (128, 256, 64, 8, 3, 8)), 2048, 1280, 8192)
    summing = tune.reduction_waves(80, 3, 8192)
    assert wide == 2 / 3 + summing
    assert 0.2 < summing < 0.3  # 4 * 240 * 295 / (8192 * 132)
    # The same sum weighs less on the H200, whose memory is faster for the same flops.
    assert tune.reduction_waves(80, 3, 8192, ridge=tune.RIDGE_H200) < summing
    assert tune.ridge_of({"device": {"name": "NVIDIA H200"}}) == tune.RIDGE_H200
    assert tune.ridge_of({"device": {"name": "NVIDIA H100 80GB HBM3"}}) == tune.RIDGE_H100
    # stream-K: 80 tiles x 128 K steps shared out as 78 steps per SM, 0.61 of a tile time
    stream = tune.waves(("stream_k", (128, 128, 64, 4, 4, 8)), 1024, 1280, 8192)
    assert stream == 78 / 128
    # stream-K on the last wave only: at M = 2048, 132 whole tiles, then 28 tiles' 3584 K steps
    # in stretches of 32 (a quarter tile, the least a program takes) on 112 SMs, each tile cut
    # at least once: 28 + 112 partial tiles to sum at most
    hybrid = tune.waves(("persistent_stream_k", (128, 128, 64, 4, 4, 8, 1)), 2048, 1280, 8192)
    assert hybrid == 1 + 32 / 128 + tune.reduction_waves(28 + 112, 1, 8192)
    # 11 x 48 tiles at M = 1408 on 8B.qkv: four whole waves, nothing left to share out
    assert tune.waves(("persistent_stream_k", (128, 128, 64, 4, 4, 8, 1)), 1408, 6144, 4096) == 4


def test_shared_tail_pieces_take_one_round_on_their_own_sms(tune: Any) -> None:
    # 50 tiles of 128 x 256 on 70B_tp8.qkv at M = 1280: persistent_tail splits them 5 ways (250
    # pieces in two rounds, 0.4 of a tile time); persistent_tail_shared's pieces wait for each
    # other, so all must run at once: at most 2 ways (100 pieces), half a tile time.
    params = (128, 256, 64, 8, 3, 8, 1)
    late = tune.waves(("persistent_tail", params), 1280, 1280, 8192)
    shared = tune.waves(("persistent_tail_shared", params), 1280, 1280, 8192)
    assert late == 2 / 5 + tune.reduction_waves(50, 5, 8192)
    assert shared == 1 / 2 + tune.reduction_waves(50, 2, 8192)


def test_the_wave_model_avoids_a_partial_wave_the_neighbours_did_not_show(tune: Any) -> None:
    # PLAIN is faster at M = 768 and 1536, where its 60 and 120 tiles fill one wave; at M = 1024
    # its 80 tiles are one wave too, so it stays the choice there.
    per_m = {
        768: {PLAIN: 10.0, WIDE: 11.0},  # both one wave
        1536: {PLAIN: 20.0, WIDE: 21.0},  # PLAIN: 120 tiles, one wave; WIDE: 60 tiles
    }
    assert tune.modelled_choice(per_m, 1024, 1280, 8192) == PLAIN
    # ...while at M = 1700 PLAIN needs 140 tiles (two waves) and WIDE 70 (one).
    per_m[3072] = {PLAIN: 30.0, WIDE: 33.0}
    assert tune.modelled_choice(per_m, 1700, 1280, 8192) == WIDE
    assert tune.modelled_choice(per_m, 512, 1280, 8192) is None  # nothing measured below


def test_past_the_last_measured_m_the_time_per_wave_carries_on(tune: Any) -> None:
    # At M = 6144 PLAIN's 480 tiles take four waves and WIDE's 240 two; at M = 8192 PLAIN needs
    # five (75 us predicted) and WIDE three (91.5 us), though WIDE was the faster at 6144.
    per_m = {6144: {PLAIN: 60.0, WIDE: 61.0}}
    assert tune.modelled_choice(per_m, 8192, 1280, 8192) == PLAIN
    assert tune.modelled_choice({64: {PLAIN: 1.0}}, 100, 1280, 8192) is None  # below the waves


def test_dispatch_rules_take_the_fastest_launch_at_each_measured_m(tune: Any) -> None:
    from codevolve.problems.gemm_kernel_gpu.static_check import check_source

    def shape(fast: Any, slow: Any) -> dict[str, Any]:
        return {tune._label(fast): {"t_us": 10.0, "cublas_us": 10.0},
                tune._label(slow): {"t_us": 12.0, "cublas_us": 10.0}}  # fmt: skip

    report = {
        "shapes": {
            "70B_tp8.qkv M=768": shape(PLAIN, WIDE),
            "70B_tp8.qkv M=3072": shape(WIDE, PLAIN),
        }
    }
    rules = tune.dispatch_rules(report)
    # PLAIN (fastest at 768) up to M = 1664, its last one-wave M (13 x 10 tiles); then WIDE
    # (fastest at 3072), whose tiles stay one wave up to M = 3328. Past 3072, each keeps its
    # time per wave there (WIDE 10 us, PLAIN 6 us): from M = 3329 WIDE needs two waves (20 us)
    # and PLAIN three up to M = 4992 (18 us), and so on by whichever fills its last wave better.
    assert rules == [
        ("M <= 1664 and N == 1280 and K == 8192", *PLAIN),
        ("M <= 3328 and N == 1280 and K == 8192", *WIDE),
        ("M <= 4992 and N == 1280 and K == 8192", *PLAIN),
        ("M <= 6656 and N == 1280 and K == 8192", *WIDE),
        ("M <= 8448 and N == 1280 and K == 8192", *PLAIN),
        ("N == 1280 and K == 8192", *WIDE),
    ]
    source = tune.initial_program()
    for condition, name, params in reversed(rules):
        source = tune.apply_hunks(
            source, tune.add_rule(source, condition, tune.VARIANTS[name], params)
        )
    assert check_source(source) == ""


def test_a_shape_always_has_the_initial_programs_own_launch_once(tune: Any) -> None:
    own = (64, 64, 128, 4, 5, 1)  # the tiled kernel's config the initial rule picks there
    launches = tune.shape_launches((32, 4096, 4096), lambda m, n, k: own)
    assert launches[-1] == ("plain", own) and ("plain", own) not in tune.launches_for(32)
    listed = next(params for name, params in tune.launches_for(32) if name == "plain")
    assert tune.shape_launches((32, 4096, 4096), lambda m, n, k: listed) == tune.launches_for(32)


def test_sweeps_read_together_average_their_ratios(tune: Any, tmp_path: Path) -> None:
    import json

    def report(cublas: float, times: dict[str, float], key: str = "8B.o M=24") -> str:
        shape = {label: {"t_us": t, "cublas_us": cublas} for label, t in times.items()}
        path = tmp_path / f"sweep{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({"samples": 5, "shapes": {key: shape}}))
        return str(path)

    first = report(10.0, {"plain 64,64,64,4,4,8": 20.0})  # 0.5 of cuBLAS
    second = report(20.0, {"plain 64,64,64,4,4,8": 10.0, "tma 64,128,64,4,4,8": 40.0})  # 2, 0.5
    merged = tune.read_sweeps([first, second])["shapes"]["8B.o M=24"]
    assert merged["plain 64,64,64,4,4,8"] == {"t_us": 20.0, "cublas_us": 20.0}  # geomean 1.0
    assert merged["tma 64,128,64,4,4,8"]["t_us"] == 40.0  # only the second sweep timed it
    # A later sweep of other shapes only (sweep --only) keeps the earlier sweeps' shapes.
    third = report(5.0, {"plain 64,64,64,4,4,8": 10.0}, key="8B.qkv M=96")
    shapes = tune.read_sweeps([first, second, third])["shapes"]
    assert (
        shapes["8B.o M=24"] == merged
        and shapes["8B.qkv M=96"]["plain 64,64,64,4,4,8"]["t_us"] == 10.0
    )
    # A variant changed since the first sweep counts from the last sweep alone.
    fresh = tune.read_sweeps([first, second], ("plain",))["shapes"]["8B.o M=24"]
    assert (
        fresh["plain 64,64,64,4,4,8"]["t_us"] == 10.0
        and fresh["tma 64,128,64,4,4,8"] == (merged["tma 64,128,64,4,4,8"])
    )


def test_below_the_wave_threshold_the_model_goes_by_time_alone(tune: Any) -> None:
    split = ("split_k", (32, 64, 128, 4, 4, 2))  # half a wave at M=24 and 32, a whole one at 48
    plain = ("plain", (64, 64, 128, 4, 5, 1))  # one wave throughout
    per_m = {24: {split: 10.5, plain: 10.0}, 48: {split: 10.5, plain: 10.0}}
    assert tune.waves(split, 32, 4096, 4096) < tune.waves(split, 48, 4096, 4096)
    assert tune.WAVES_FROM_M > 32
    # Counting waves would predict the split launch at M=32 a third faster than measured around.
    assert tune.modelled_choice(per_m, 32, 4096, 4096) == plain


def test_a_launch_slow_at_both_neighbours_is_not_chosen_between_them(tune: Any) -> None:
    # The split launch counts 1.6 tile times at M = 96 and 128 but 4.1 at M = 192, so its time
    # per wave, interpolated, makes the model alone predict it the fastest at M = 128; it was
    # over CONTENDER_SLACK slower than PLAIN at both measured Ms, so it is no contender.
    split = ("tail_split", (64, 256, 64, 4, 3, 8))
    per_m = {96: {PLAIN: 10.0, split: 13.0}, 192: {PLAIN: 12.0, split: 15.0}}
    assert min(13.0 / 10.0, 15.0 / 12.0) > 1 + tune.CONTENDER_SLACK
    assert tune.modelled_choice(per_m, 128, 8192, 1024) == PLAIN
    per_m[96][split] = 11.0  # within the slack at M = 96: the model decides
    assert tune.modelled_choice(per_m, 128, 8192, 1024) == split


def test_a_launch_the_model_fits_is_a_contender_however_slow_it_was_around(tune: Any) -> None:
    # 70B_tp8.qkv: 128 x 160 tiles are one wave at M = 1536 (96 tiles) and two at 3072 (192),
    # 25 % and 38 % slower there than PLAIN, whose 128 x 128 tiles take one and two waves. At
    # M = 2048 the wide tiles make one wave (128 tiles) and PLAIN two (160): the wide launch's
    # time per wave agrees at both Ms (70.0 and 69.0 us), so the model predicts it, at 69.6 us
    # against PLAIN's 2 x 53.4.
    wide = ("tma_wide", (128, 128, 64, 4, 4, 8, 32))
    per_m = {1536: {PLAIN: 56.0, wide: 70.0}, 3072: {PLAIN: 100.0, wide: 138.0}}
    assert [tune.waves(launch, 2048, 1280, 8192) for launch in (PLAIN, wide)] == [2, 1]
    assert all(per_m[x][wide] > (1 + tune.CONTENDER_SLACK) * per_m[x][PLAIN] for x in per_m)
    assert tune.modelled_choice(per_m, 2048, 1280, 8192) == wide
    per_m[3072][wide] = 2 * 70.0 * 1.06  # its time per wave 6 % apart: not fitted, no contender
    assert tune.modelled_choice(per_m, 2048, 1280, 8192) == PLAIN


def test_gains_name_the_shapes_a_variant_wins_and_by_how_much(tune: Any) -> None:
    def timed(t_us: float) -> dict[str, float]:
        return {"t_us": t_us, "cublas_us": 10.0}

    report = {
        "shapes": {
            "8B.qkv M=256": {
                "tma 128,64,64,4,4,8": timed(12.5),  # 0.8 of cuBLAS
                "tma_wide 128,64,64,4,4,8,32": timed(10.0),  # 1.0: 1.25x the other
                "plain 64,64,64,4,3,8": {"error": "out of resources"},
            },
            "8B.qkv M=512": {
                "tma 128,64,64,4,4,8": timed(10.0),
                "tma_wide 128,64,64,4,4,8,32": timed(20.0),
            },
            "8B.o M=192": {"tma_wide 128,64,64,4,4,8,32": timed(10.0)},  # nothing to compare
        }
    }
    wins, without, with_them = tune.variant_gains(report, ("tma_wide",))
    assert wins == {"8B.qkv M=256": (("tma_wide", (128, 64, 64, 4, 4, 8, 32)), 1.0, 1.25)}
    assert without == pytest.approx((0.8 * 1.0) ** 0.5)
    assert with_them == pytest.approx(1.0)


def test_l2_bytes_follow_the_tiles_harmonic_size(tune: Any) -> None:
    # 70B_tp8.qkv M=1024 (N = 1280, K = 8192): 128 x 128 tiles read x 10 times and w 8 times
    square = tune.l2_bytes(PLAIN, 1024, 1280, 8192)
    assert square == 2 * 8192 * (1024 * 10 + 1280 * 8)
    # 128 x 256: x 5 times; 256 x 160 (wide, split or not): x 8 times, w 4 times
    assert tune.l2_bytes(WIDE, 1024, 1280, 8192) / square == 0.75
    wide_split = ("tma_wide_split", (256, 128, 64, 8, 3, 8, 4, 32))
    assert tune.l2_bytes(wide_split, 1024, 1280, 8192) == 2 * 8192 * (1024 * 8 + 1280 * 4)
    # a ragged edge reads whole tiles: M = 100 in 128-row tiles reads 128 rows of x per tile
    assert tune.l2_bytes(PLAIN, 100, 128, 64) == 2 * 64 * (128 + 128)


def test_l2_rates_put_the_slowest_shape_first(tune: Any) -> None:
    def shape(t_us: float, cublas_us: float) -> dict[str, Any]:
        return {"plain 128,128,64,4,4,8": {"t_us": t_us, "cublas_us": cublas_us}}

    report = {"shapes": {"70B_tp8.qkv M=1024": shape(50.0, 40.0),
                         "70B_tp8.qkv M=2048": shape(100.0, 90.0),
                         "70B_tp8.qkv M=16": shape(10.0, 10.0)}}  # fmt: skip
    rows = tune.l2_rates(report, 192)
    assert [row[0] for row in rows] == ["70B_tp8.qkv M=1024", "70B_tp8.qkv M=2048"]
    assert rows[0][2] == 0.8
    assert rows[0][3] == tune.l2_bytes(PLAIN, 1024, 1280, 8192) / 50.0 / 1e6


def test_a_heldout_sweep_is_refused_by_everything_that_chooses(tune: Any, tmp_path: Path) -> None:
    import json

    shapes = {"8B.o M=512": {"plain 64,64,64,4,4,8": {"t_us": 20.0, "cublas_us": 10.0}}}
    heldout = tmp_path / "heldout.json"
    heldout.write_text(json.dumps({"samples": 5, "heldout": True, "shapes": shapes}))
    selection = tmp_path / "selection.json"
    selection.write_text(json.dumps({"samples": 5, "shapes": shapes}))
    with pytest.raises(SystemExit, match="held-out test shapes"):
        tune.read_sweeps([str(selection), str(heldout)])
    assert tune.read_sweeps([str(selection)])["shapes"] == shapes
    assert {s.m for s in tune.selection_shapes(heldout=True)} & {512, 1024}
    test_keys = {tune.shape_key(s) for s in tune.selection_shapes(heldout=True)}
    assert len(test_keys) == 44 and not test_keys & {
        tune.shape_key(s) for s in tune.selection_shapes()
    }


def test_selection_losses_compare_the_choice_with_the_heldout_best(tune: Any) -> None:
    def shape(times: dict[Any, float]) -> dict[str, Any]:
        return {tune._label(launch): {"t_us": t, "cublas_us": 10.0} for launch, t in times.items()}

    # Measured at 768 and 3072 only: up to M = 1664 the program runs PLAIN (one wave), then WIDE.
    report = {
        "shapes": {
            "70B_tp8.qkv M=768": shape({PLAIN: 10.0, WIDE: 12.0}),
            "70B_tp8.qkv M=3072": shape({WIDE: 10.0, PLAIN: 12.0}),
        }
    }
    heldout = {
        "heldout": True,
        "shapes": {
            "70B_tp8.qkv M=1024": shape({PLAIN: 20.0, WIDE: 16.0}),
            "70B_tp8.qkv M=1536": shape({WIDE: 10.0}),  # the choice there (PLAIN) not timed
            "70B_tp8.qkv M=2048": shape({WIDE: 10.0, PLAIN: 8.0}),
        },
    }
    rows = tune.selection_losses(report, heldout)
    assert rows == [
        ("70B_tp8.qkv M=1024", tune._label(PLAIN), 0.5, tune._label(WIDE), 0.625),
        ("70B_tp8.qkv M=1536", tune._label(PLAIN), None, tune._label(WIDE), 1.0),
        ("70B_tp8.qkv M=2048", tune._label(WIDE), 1.0, tune._label(PLAIN), 1.25),
    ]


def test_every_swept_launch_fits_the_shared_memory(tune: Any) -> None:
    # The model against what Triton 3.6 asked on the H100: 4-deep 128x256 persistent tiles do
    # not fit (262,176 bytes), 6-deep 128x128 ones do.
    assert tune.shared_bytes(("tma_persistent", (128, 256, 64, 8, 4, 8, 1))) > tune.SHARED_LIMIT
    assert tune.shared_bytes(("tma_persistent", (128, 128, 64, 4, 6, 8, 1))) <= tune.SHARED_LIMIT
    assert tune.shared_bytes(("tail_split", (128, 256, 64, 8, 4, 8))) <= tune.SHARED_LIMIT
    too_big = {
        launch
        for _, _, launches in tune.LAUNCHES
        for launch in launches
        if tune.shared_bytes(launch) > tune.SHARED_LIMIT
    }
    assert not too_big
