"""The compile lane of gemm-kernel-gpu's judge: a program's Triton kernels compiled ahead of its
timing, in caged compile runners, several programs at once across the host's cores (trusted code
of the judge).

A program's kernels compile on its first call of each shape; in the timing runner that is seconds
to a minute of the device's time spent on the host's. Here they compile before: a compile runner
(``RunnerSettings.compile_only``: its own uid, Landlock, seccomp, rlimits, no GPU at all) loads the
program through the same filter and calls it once per judged shape on meta tensors, every launch
turned into Triton's warm-up (kernel_compile_role.py), so Triton compiles each kernel the timing
runner will ask for, for the judge's GPU, into a folder kept for that source. Then the runner is
ended, and the timing runner of the same source starts with a copy of the folder's regular files
in its own cache (``Runner.seed_kernels``): no compile is left for the timing lane, which asks
less time of each request.

The trust boundary: a folder is written only by compile runners of one source (Landlock, its
uid), and its copies go only to timing runners of that same source, so a program can spoil no
other program's kernels, only its own; the judge copies regular files and follows no link. What a
compile runner says is no verdict: a program that does not load is refused here (it would not load
in the timing runner either), a compile that outlasts :attr:`CompileLane.timeout_s` fails the
program (its host code or its kernels never finish compiling), and anything else it met is met
again by the timing runner, where the judge sees it.

Imported only in the device process and in tests (needs torch).
"""

from __future__ import annotations

import collections
import contextlib
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from codevolve.evaluator_workers.gpu.remote import CandidateProblem, LoadFailed, start_remote
from codevolve.evaluator_workers.gpu.runner_link import RunnerGone, RunnerPool, RunnerSettings
from codevolve.evaluator_workers.gpu.shared_tensors import Arena
from codevolve.evaluator_workers.gpu.source_loader import dunder_problem, source_digest
from codevolve.problems.gemm_kernel_gpu.device.kernel_bench import workspace_elements
from codevolve.problems.gemm_kernel_gpu.device.kernel_compile_role import COMPILE_OP
from codevolve.problems.gemm_kernel_gpu.device.kernel_compile_role import ROLE as COMPILE_ROLE
from codevolve.problems.gemm_kernel_gpu.device.kernel_loader import ENTRY_POINT
from codevolve.problems.gemm_tiling.gpu_timing import Shape

COMPILE_TIMEOUT_S = 240.0  # seconds a program's kernels may take to compile, all shapes
KEPT_SOURCES = 512  # sources whose compiled folders are kept; the oldest unused one goes first


@dataclass(frozen=True, slots=True)
class Target:
    """The GPU Triton compiles for: the judge's (``backend`` "cuda", ``arch`` 90 for Hopper)."""

    backend: str
    arch: int
    warp_size: int = 32

    @classmethod
    def parse(cls, text: str) -> Target:
        """``"cuda:90"`` (backend, architecture)."""
        backend, _, arch = text.partition(":")
        if not backend or not arch.isdigit():
            raise ValueError(f"a compile target is BACKEND:ARCH, e.g. cuda:90, not {text!r}")
        return cls(backend, int(arch))


@dataclass(frozen=True, slots=True)
class Compiled:
    """What the compile lane gives a program's judging."""

    folder: str | None = None  # its kernels, for the timing runner to start with (None: none)
    complete: bool = False  # every judged call compiled: the timing runner compiles nothing
    load_error: str = ""  # the program did not load (or never finished compiling): refused
    seconds: float = 0.0
    note: str = ""  # why the lane gave nothing, or what the program raised there (no verdict)


@dataclass(frozen=True, slots=True)
class _Kept:
    folder: str  # a source's compiled kernels
    complete: frozenset[Shape]  # shapes a compile of it finished without a problem


class CompileLane:
    """Compile runners for up to ``width`` programs at once (thread-safe: each judging compiles
    in its own thread and waits here for a slot). ``width`` 0, or no target: the lane is off and
    timing runners compile for themselves."""

    def __init__(
        self,
        *,
        width: int,
        target: Target | None,
        num_sms: int,
        device: str,
        rules: bool = True,
        timeout_s: float = COMPILE_TIMEOUT_S,
    ) -> None:
        self.width = width if target is not None else 0
        self.target = target
        self.num_sms = num_sms
        self.device = device  # the timing runners': what workspaces they are given
        self.timeout_s = timeout_s
        self._slots = threading.BoundedSemaphore(max(1, self.width))
        self._lock = threading.Lock()
        self._busy: dict[str, threading.Lock] = {}  # per source: one compile at a time
        self._kept: collections.OrderedDict[str, _Kept] = collections.OrderedDict()  # by use
        self._runners: RunnerPool | None = None
        if self.width:
            settings = RunnerSettings(device="cpu", compile_only=True, rules=rules)
            self._runners = RunnerPool(settings, warm=self.width)
            self._runners.preload(COMPILE_ROLE)

    @property
    def enabled(self) -> bool:
        return self._runners is not None

    def compile(self, source: str, shapes: Sequence[Shape]) -> Compiled:
        """``source``'s kernels for ``shapes`` compiled, or what stopped it; at once when the
        lane is off or a judging of this source compiled them all before."""
        if self._runners is None:
            return Compiled(note="no compile lane")
        refused = dunder_problem(source) if self._runners.settings.rules else ""
        if refused:
            return Compiled(load_error=refused)
        wanted = frozenset(shapes)
        digest = source_digest(source)
        with self._source(digest):  # waiting here holds no slot: another program may compile
            with self._lock:
                kept = self._kept.get(digest)
            if kept is not None and wanted <= kept.complete:
                return Compiled(folder=kept.folder, complete=True)
            with self._slots:
                compiled = self._run(source, sorted(wanted), time.perf_counter())
            if compiled.folder is not None:
                done = wanted if compiled.complete else frozenset()
                with self._lock:
                    before = kept.complete if kept is not None else frozenset()
                    self._kept[digest] = _Kept(compiled.folder, done | before)
                    self._kept.move_to_end(digest)
        self._prune()
        return compiled

    def _run(self, source: str, shapes: list[Shape], started: float) -> Compiled:
        assert self._runners is not None and self.target is not None
        arena = Arena.create(4096, "cpu")  # a compile runner reads no buffer: the protocol's
        remote = None
        try:
            remote = start_remote(
                self._runners, arena, source,
                trusted=False, role=COMPILE_ROLE, who=ENTRY_POINT, timeout_s=self.timeout_s,
            )  # fmt: skip
            left = max(1.0, self.timeout_s - (time.perf_counter() - started))
            calls = [[m, n, k, workspace_elements(m, n, self.device)] for m, n, k in shapes]
            message = {
                "op": COMPILE_OP,
                "target": {
                    "backend": self.target.backend,
                    "arch": self.target.arch,
                    "warp_size": self.target.warp_size,
                },
                "calls": calls,
                "num_sms": self.num_sms,
            }
            reply = remote.runner.request(message, timeout_s=left)
        except LoadFailed as exc:
            return Compiled(load_error=str(exc), seconds=time.perf_counter() - started)
        except (RunnerGone, CandidateProblem) as exc:
            seconds = time.perf_counter() - started
            if seconds >= self.timeout_s:
                why = f"compiling its kernels took longer than {self.timeout_s:g} s"
                return Compiled(load_error=why, seconds=seconds)
            folder = remote.cache if remote is not None else None
            return Compiled(folder=folder, seconds=seconds, note=str(exc)[:300])
        finally:
            if remote is not None:
                remote.close()  # the runner ended (its uid swept) before any copy of its folder
            arena.close()
        problems = [str(p)[:300] for p in reply.get("problems", [])][:5]
        complete = reply.get("compiled") == len(shapes) and not problems
        return Compiled(
            folder=remote.cache,
            complete=complete,
            seconds=time.perf_counter() - started,
            note="; ".join(problems),
        )

    @contextlib.contextmanager
    def _source(self, digest: str) -> Iterator[None]:
        """One compile runner at a time per source: they share its folder."""
        with self._lock:
            lock = self._busy.setdefault(digest, threading.Lock())
        with lock:
            yield

    def _prune(self) -> None:
        """Past :data:`KEPT_SOURCES`, the oldest folders no compile is using are removed."""
        with self._lock:
            extra = len(self._kept) - KEPT_SOURCES
            oldest = list(self._kept.items())[: max(0, extra)]
        for digest, kept in oldest:
            with self._lock:
                lock = self._busy.get(digest)
                if lock is not None and not lock.acquire(blocking=False):
                    continue  # compiling now: it stays
                self._kept.pop(digest, None)
                self._busy.pop(digest, None)
            try:
                shutil.rmtree(kept.folder, ignore_errors=True)
            finally:
                if lock is not None:
                    lock.release()

    def close(self) -> None:
        if self._runners is not None:
            self._runners.close()
            self._runners = None
