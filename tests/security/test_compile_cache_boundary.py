"""The worker's torch.compile cache against hostile KernelBench candidates on the CPU: what
trusted runners compiled there is code later trusted runners load and run, so no candidate may
read, list or write it, nor hold its lock (evaluator_workers/gpu/compile_cache.py).

Each candidate runs with the source rules off and reports what it found by raising; the judge
reports the first line of its message as the reply's ``problem``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from codevolve.evaluator_workers.gpu.compile_cache import lend  # noqa: E402
from tests.kb_judging import RELU, Judges, hostile_model_new  # noqa: E402

SECRET = "compiled-by-a-trusted-runner-7c1e"


@pytest.fixture(scope="module")
def cache() -> Iterator[Path]:
    """The compile cache as a trusted runner leaves it: its lent folder holding a compiled
    entry, given back to the judge. Every folder above it is open to all (pytest's own are
    not), so that only the cache's own defences stand."""
    base = Path(tempfile.mkdtemp(prefix="codevolve-worker-cache-"))
    base.chmod(0o755)
    root = base / "torch-compile"
    lease = lend(str(root), None)
    assert lease is not None
    entry = Path(lease.folder, "inductor", "ab", "entry.py")
    entry.parent.mkdir(parents=True)
    entry.write_text(f"KERNEL = {SECRET!r}\n")
    lease.give_back()
    yield root
    shutil.rmtree(base)


@pytest.fixture(scope="module")
def judges(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Iterator[Judges]:
    judges = Judges(tmp_path_factory.mktemp("kb-cache"), compile_cache=str(cache))
    judges.rules = False
    yield judges
    judges.close()


def _found(reply: dict[str, Any]) -> str:
    assert reply["problem"].startswith("ModelNew raised"), reply
    return str(reply["problem"])


def _reads(path: Path) -> str:
    return hostile_model_new(
        f"""
        def forward(self, x):
            with B.open({str(path)!r}) as f:
                raise RuntimeError("read " + f.read())
        """
    )


def test_a_candidate_cannot_read_what_a_trusted_runner_compiled(
    judges: Judges, cache: Path
) -> None:
    found = _found(judges.judge(RELU, _reads(cache / "cache" / "inductor" / "ab" / "entry.py")))
    assert SECRET not in found and "read" not in found.split(": ", 1)[1], found


def test_a_candidate_cannot_list_the_cache(judges: Judges, cache: Path) -> None:
    forward = f"""
    def forward(self, x):
        raise RuntimeError("listed " + ",".join(mod("os").listdir({str(cache / "cache")!r})))
    """
    found = _found(judges.judge(RELU, hostile_model_new(forward)))
    assert "listed" not in found and "inductor" not in found, found


def test_landlock_alone_hides_the_cache_from_a_candidate_of_any_uid(
    judges: Judges, cache: Path
) -> None:
    """Every folder and file world-readable: the uid no longer keeps the candidate out, Landlock
    (which leaves the folder out of every runner's rules) must."""
    entry = cache / "cache" / "inductor" / "ab" / "entry.py"
    modes = {path: path.stat().st_mode for path in (cache, *cache.rglob("*"))}
    for path in modes:
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        reply = judges.judge(RELU, _reads(entry))
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
    if not reply["isolation"].get("landlock"):
        pytest.skip("no Landlock on this kernel")
    found = _found(reply)
    assert SECRET not in found and "Permission" in found, found


def test_a_candidate_cannot_write_into_the_cache(judges: Judges, cache: Path) -> None:
    planted = cache / "cache" / "inductor" / "ab" / "planted.py"
    folder = planted.parent
    mode = folder.stat().st_mode
    folder.chmod(0o777)  # the uid alone would allow it: Landlock must refuse
    try:
        forward = f"""
        def forward(self, x):
            with B.open({str(planted)!r}, "w") as f:
                f.write("KERNEL = 'forged'")
            raise RuntimeError("planted it")
        """
        found = _found(judges.judge(RELU, hostile_model_new(forward)))
    finally:
        folder.chmod(mode)
    assert "planted it" not in found and not planted.exists(), found


def test_a_candidate_cannot_hold_the_lock_that_trusted_runners_wait_for(
    judges: Judges, cache: Path
) -> None:
    forward = f"""
    def forward(self, x):
        fd = mod("os").open({str(cache / "lock")!r}, mod("os").O_RDONLY)
        mod("fcntl").flock(fd, mod("fcntl").LOCK_EX)
        raise RuntimeError("holding the lock")
    """
    found = _found(judges.judge(RELU, hostile_model_new(forward)))
    assert "holding the lock" not in found, found


@pytest.mark.skipif(os.geteuid() != 0, reason="runners have uids of their own only under root")
def test_without_landlock_the_uid_keeps_a_candidate_out(tmp_path: Path, cache: Path) -> None:
    judges = Judges(tmp_path, compile_cache=str(cache), layers=("seccomp",))
    judges.rules = False
    try:
        reply = judges.judge(RELU, _reads(cache / "cache" / "inductor" / "ab" / "entry.py"))
    finally:
        judges.close()
    assert not reply["isolation"]["landlock"]
    found = _found(reply)
    assert SECRET not in found and "Permission" in found, found
