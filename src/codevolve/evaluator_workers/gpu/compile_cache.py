"""torch.compile's caches of trusted programs, kept on disk from one device process to the next
and lent to one trusted runner at a time (the judge's side; stdlib only).

A judge that times ``torch.compile`` of a reference (KernelBench's ``compile`` baseline) has it
compiled in a trusted runner of its own. Inductor's caches (its FX graph cache and the code it
generates) and Triton's compiled kernels then go to ``<cache>/torch-compile/cache`` of the
worker's cache folder (core/cache_dir.py) instead of the runner's scratch folder, which is
thrown away: a later device process (the next sitting of a KernelBench set) compiles the same
references from the cache in seconds, and references that share a kernel share it.

What is in there is trusted code's output that later trusted runners load and run, so no
candidate may read or write it:

- every runner's Landlock rules leave ``<cache>/torch-compile`` out (runner.py): only the runner
  it is lent to gets the lent folder, as its one writable folder beside its scratch;
- the folder is the judge's, mode 0700 (``torch-compile`` itself 0711, its lock file 0600); as
  root its files are given to the uid of the runner it is lent to while that runner lives and
  taken back when the runner ends, so a later candidate given the same uid finds them root's;
- one runner holds it at a time, across the device processes of the host too: an ``flock`` on
  ``torch-compile/lock``, waited for up to :data:`LOCK_WAIT_S`; a runner that does not get it
  compiles into its own scratch folder (nothing cached, nothing shared).

Without root every runner has the judge's uid and Landlock alone keeps candidates out of the
folder; without Landlock as well (an old kernel), nothing does (docs/security.md).

Imported only in the device process (stdlib, no torch).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Mapping

from codevolve.core.cache_dir import cache_home

FOLDER = "torch-compile"  # in the worker's cache folder
LENT = "cache"  # the folder lent to a runner, in FOLDER
LOCK = "lock"  # in FOLDER
LOCK_WAIT_S = 120.0  # seconds a judge waits for another process's compile before going without
POLL_S = 0.1


def compile_cache_root(environ: Mapping[str, str] | None = None) -> str:
    """``<cache>/torch-compile`` of the worker's cache folder, as a real path."""
    return os.path.realpath(cache_home(environ) / FOLDER)


class Lease:
    """The lent folder, held for one runner: :meth:`give_back` once, when that runner ended."""

    def __init__(self, folder: str, lock_fd: int) -> None:
        self.folder = folder
        self._lock_fd: int | None = lock_fd

    def give_back(self) -> None:
        """The folder's files back to this process's uid, and the lock released (idempotent)."""
        if self._lock_fd is None:
            return
        try:
            if os.geteuid() == 0:
                _chown_tree(self.folder, os.geteuid(), os.getegid())
        finally:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None


def lend(root: str, uid: int | None, *, wait_s: float = LOCK_WAIT_S) -> Lease | None:
    """The folder lent for a runner of ``uid`` (None: the judge's own uid), or None when it
    cannot be made or another runner holds it longer than ``wait_s``."""
    folder = os.path.join(root, LENT)
    try:
        os.makedirs(root, exist_ok=True)
        os.chmod(root, 0o711)  # runners may pass through to the lent folder, list nothing
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        fd = os.open(os.path.join(root, LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    if not _locked(fd, wait_s):
        os.close(fd)
        return None
    lease = Lease(folder, fd)
    if uid is not None:
        try:
            _chown_tree(folder, uid, uid)
        except BaseException:
            lease.give_back()
            raise
    return lease


def _locked(fd: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


def _chown_tree(folder: str, uid: int, gid: int) -> None:
    """``folder`` and everything beneath it (links themselves, never what they point to)."""
    os.chown(folder, uid, gid, follow_symlinks=False)
    for path, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                os.chown(os.path.join(path, name), uid, gid, follow_symlinks=False)
