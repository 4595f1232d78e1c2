"""The cost model's tables on disk: written by the first process, read by the next, computed again
when the file is broken or the model changed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codevolve.core.cache_dir import CACHE_ENV
from codevolve.problems.gemm_tiling import cost_model, table_cache
from codevolve.problems.gemm_tiling.cost_model import times_of
from codevolve.problems.gemm_tiling.shapes import GemmShape

SHAPES = [GemmShape(1, 4096, 4096), GemmShape(512, 1280, 8192), GemmShape(8192, 8192, 1024)]
DIMS = [(s.m, s.n, s.k) for s in SHAPES]
SOURCES = (cost_model.__file__,)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    return tmp_path


def _table(calls: list[int]) -> np.ndarray:
    calls.append(1)
    return times_of(SHAPES)


def test_the_second_read_comes_from_the_file_and_equals_the_computed_table(folder: Path) -> None:
    calls: list[int] = []
    columns = times_of(SHAPES).shape[1]
    first = table_cache.cached_table("t", DIMS, columns, lambda: _table(calls), SOURCES)
    second = table_cache.cached_table("t", DIMS, columns, lambda: _table(calls), SOURCES)
    assert calls == [1] and len(list(folder.glob("t-*.npy"))) == 1
    assert np.array_equal(first, second) and not second.flags.writeable


def test_a_broken_or_misshapen_file_is_computed_again(folder: Path) -> None:
    calls: list[int] = []
    columns = times_of(SHAPES).shape[1]
    table_cache.cached_table("t", DIMS, columns, lambda: _table(calls), SOURCES)
    (path,) = folder.glob("t-*.npy")
    path.write_bytes(b"not numpy")
    again = table_cache.cached_table("t", DIMS, columns, lambda: _table(calls), SOURCES)
    np.save(path, np.zeros((2, 2)))
    third = table_cache.cached_table("t", DIMS, columns, lambda: _table(calls), SOURCES)
    assert calls == [1, 1, 1] and np.array_equal(again, third)


def test_other_shapes_name_another_file(folder: Path) -> None:
    assert table_cache.table_digest(DIMS, SOURCES) != table_cache.table_digest(DIMS[:2], SOURCES)


def test_an_unwritable_folder_costs_only_the_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "below"))
    calls: list[int] = []
    columns = times_of(SHAPES).shape[1]
    table = table_cache.cached_table("t", DIMS, columns, lambda: _table(calls), SOURCES)
    assert calls == [1] and table.shape == (3, columns)
