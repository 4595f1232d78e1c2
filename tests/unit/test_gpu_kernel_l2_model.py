"""bench/gpu_kernel_l2_model.py, the LRU sketch behind persistent_stream_k's K order: a stretch
run from its piece at K step 0 shares panels through the cache; run first tile first, it does
not once the cache is smaller than the panels its programs are spread over."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.bench_modules import load_bench


@pytest.fixture(scope="module")
def model() -> Any:
    return load_bench("gpu_kernel_l2_model")


def test_the_swizzled_order_walks_a_group_of_rows_down_each_column(model: Any) -> None:
    # 3 rows of tiles (fewer than GROUP_M) and 4 columns: column-major within the group.
    assert [model.tile_position(t, 3, 4) for t in range(4)] == [(0, 0), (1, 0), (2, 0), (0, 1)]


def test_a_cache_holding_everything_reads_each_byte_once(model: Any) -> None:
    for last_first in (False, True):
        assert model.missed(1536, 1280, 8192, 128, 128, last_first=last_first,
                            l2_bytes=1 << 40) == pytest.approx(1.0)  # fmt: skip


def test_the_piece_at_step_zero_first_keeps_programs_sharing_panels(model: Any) -> None:
    # 120 tiles of 128 steps over 132 programs: stretches of 117 steps, a tail and a head each.
    old = model.missed(1536, 1280, 8192, 128, 128, last_first=False, l2_bytes=30 << 20)
    new = model.missed(1536, 1280, 8192, 128, 128, last_first=True, l2_bytes=30 << 20)
    assert new < 1.05 < 4 < old
