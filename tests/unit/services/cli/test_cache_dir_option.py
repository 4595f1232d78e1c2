"""``--cache-dir``: the commands that evaluate take it, and it becomes the worker's cache folder
of this process and of every process it starts (core/cache_dir.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codevolve.core.cache_dir import CACHE_ENV, cache_home
from codevolve.services.cli import _parser
from codevolve.services.cli.options import use_cache_dir


@pytest.mark.parametrize(
    "command",
    [
        ["run", "gemm-tiling"],
        ["evaluate", "--problem", "gemm-tiling"],
        ["worker"],
        ["kernelbench", "--dir", "KernelBench"],
    ],
)
def test_the_commands_that_evaluate_set_the_cache_folder_for_their_processes(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    args = _parser().parse_args([*command, "--cache-dir", "cache"])
    use_cache_dir(args)
    assert os.environ[CACHE_ENV] == str(tmp_path.resolve() / "cache")  # absolute for children
    assert cache_home() == tmp_path.resolve() / "cache"


def test_without_the_option_the_environment_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    use_cache_dir(_parser().parse_args(["run", "gemm-tiling"]))
    assert os.environ[CACHE_ENV] == str(tmp_path)
