"""torch.compile's cache folder: where it is, and lent to one runner at a time, whose uid owns
its files only while it holds it (the judge's side; no runner, no torch)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from codevolve.core.cache_dir import CACHE_ENV, cache_home
from codevolve.evaluator_workers.gpu.compile_cache import compile_cache_root, lend

RUNNER_UID = 230_999  # a runner's uid, as runner_link gives them (no such user is needed)


def test_the_folder_is_the_workers_cache_folder_however_it_is_named(tmp_path: Path) -> None:
    assert cache_home({CACHE_ENV: str(tmp_path / "c")}) == tmp_path / "c"
    assert cache_home({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "codevolve"
    assert cache_home({"HOME": str(tmp_path)}) == tmp_path / ".cache" / "codevolve"
    either = {CACHE_ENV: str(tmp_path / "c"), "XDG_CACHE_HOME": str(tmp_path / "x")}
    assert cache_home(either) == tmp_path / "c"  # the variable wins
    root = compile_cache_root({CACHE_ENV: str(tmp_path)})
    assert root == os.path.realpath(tmp_path / "torch-compile")


def test_one_runner_holds_the_folder_at_a_time(tmp_path: Path) -> None:
    root = str(tmp_path / "torch-compile")
    first = lend(root, None)
    assert first is not None and first.folder == os.path.join(root, "cache")
    assert stat.S_IMODE(os.stat(first.folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o711  # passed through, never listed
    assert stat.S_IMODE(os.stat(os.path.join(root, "lock")).st_mode) == 0o600
    assert lend(root, None, wait_s=0.2) is None  # held: the second compiles without it
    first.give_back()
    first.give_back()  # once only: a second release does nothing
    second = lend(root, None, wait_s=0.2)
    assert second is not None
    second.give_back()


def test_a_folder_that_cannot_be_made_lends_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert lend(str(blocker / "torch-compile"), None) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="runners have uids of their own only under root")
def test_the_runners_uid_owns_the_files_only_while_it_holds_them(tmp_path: Path) -> None:
    root = str(tmp_path / "torch-compile")
    lease = lend(root, RUNNER_UID)
    assert lease is not None
    written = Path(lease.folder, "inductor", "fxgraph", "entry")
    written.parent.mkdir(parents=True)
    written.write_text("compiled")  # as if the runner wrote it
    os.symlink("/etc/passwd", Path(lease.folder, "link"))
    os.lchown(written, RUNNER_UID, RUNNER_UID)
    assert os.stat(lease.folder).st_uid == RUNNER_UID
    lease.give_back()
    for path in (Path(lease.folder), written, written.parent):
        assert os.lstat(path).st_uid == 0, path
    again = lend(root, RUNNER_UID + 1)
    assert again is not None
    assert os.lstat(written).st_uid == RUNNER_UID + 1
    assert os.stat("/etc/passwd").st_uid == 0  # a link's target is never given away
    again.give_back()


def test_the_lock_is_kept_across_processes(tmp_path: Path) -> None:
    root = str(tmp_path / "torch-compile")
    lease = lend(root, None)
    assert lease is not None
    pid = os.fork()
    if pid == 0:  # another device process of the host
        os._exit(0 if lend(root, None, wait_s=0.2) is None else 1)
    assert os.waitpid(pid, 0)[1] == 0
    lease.give_back()
