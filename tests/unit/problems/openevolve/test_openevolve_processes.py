"""Evaluators that start processes, as many of OpenEvolve's own do, run in the real sandbox.

An OpenEvolve evaluator often runs the candidate as ``subprocess.run([sys.executable, path],
timeout=...)``, or spreads work over ``multiprocessing`` (a Pool, a Process and a Queue, which
need POSIX semaphores in /dev/shm; a "spawn" Pool, which starts fresh interpreters). Each case
here is one evaluator call through the bundle's stage and the real sandbox pool, under every pool
set-up; where a set-up cannot offer what the evaluator needs, it fails with its traceback. Nothing
the evaluator started is left running, and nothing it made in /dev/shm reaches the next call.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from codevolve.core.config import SandboxLimits
from codevolve.core.program import StageResult
from codevolve.evaluator_workers.cascade import SandboxedCandidate
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.problems.openevolve import OpenEvolveProblem, make_bundle

EVALUATOR = """\
import multiprocessing
import os
import runpy
import subprocess
import sys


def _value(path):
    return runpy.run_path(path)["VALUE"]


def _into(queue, path):
    queue.put(_value(path))


def _run(path, timeout):
    done = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the program failed: {done.stderr}")
    return float(done.stdout)


def evaluate(program_path):
    mode = runpy.run_path(program_path)["MODE"]
    if mode in ("subprocess", "hang"):
        values = [_run(program_path, timeout=30)]
    elif mode == "hang_caught":
        try:
            values = [_run(program_path, timeout=1)]
        except subprocess.TimeoutExpired:
            return {"combined_score": 0.0, "error": "the program timed out"}
    elif mode == "pool":
        with multiprocessing.Pool(2) as pool:
            values = pool.map(_value, [program_path] * 4)
    elif mode == "spawn":  # fresh interpreters that import this module again
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            values = pool.map(_value, [program_path] * 4)
    elif mode == "queue":
        queue = multiprocessing.Queue()
        worker = multiprocessing.Process(target=_into, args=(queue, program_path))
        worker.start()
        values = [queue.get(timeout=30)]
        worker.join(30)
    elif mode == "shell":
        values = [float(subprocess.run(["/bin/sh", "-c", "echo 1"], capture_output=True).stdout)]
    elif mode == "shm_left":
        lock = multiprocessing.Lock()  # a semaphore in /dev/shm, unlinked at once
        with lock:
            values = [_value(program_path)]
        seen = len(os.listdir("/dev/shm"))
        open("/dev/shm/left-by-" + str(os.getpid()), "w").write("state")
        return {"combined_score": values[0], "seen": seen}
    else:
        raise KeyError(mode)
    return {"combined_score": sum(values) / len(values), "runs": len(values)}
"""
PROGRAM = """\
import time

MODE = {mode!r}
VALUE = 2.5
if __name__ == "__main__":
    if MODE.startswith("hang"):
        while True:  # MARKER
            time.sleep(0.01)
    print(VALUE)
"""
SET_UPS: dict[str, tuple[str, ...]] = {
    "all_layers": (),
    "no_namespaces": ("unprivileged", "no_network", "private_ipc", "private_shm"),
    "no_landlock_no_seccomp": ("landlock", "seccomp"),
}
MULTIPROCESSING = ("pool", "queue", "spawn")


@pytest.fixture(scope="module")
def pools() -> Iterator[dict[str, SandboxPool]]:
    started = {name: SandboxPool(size=1, disabled=off) for name, off in SET_UPS.items()}
    try:
        for pool in started.values():
            pool.start()
        yield started
    finally:
        for pool in started.values():
            pool.close()


@pytest.fixture(scope="module")
def problem() -> OpenEvolveProblem:
    files = {
        "initial_program.py": PROGRAM.format(mode="subprocess").encode(),
        "evaluator.py": EVALUATOR.encode(),
    }
    return OpenEvolveProblem(make_bundle(files))


def evaluate(problem: OpenEvolveProblem, pool: SandboxPool, source: str) -> StageResult:
    limits = SandboxLimits(wall_s=20.0, cpu_s=20.0, memory_mb=512)
    candidate = SandboxedCandidate(source, limits=limits, pool=pool)
    return problem.stages[0].run(candidate, np.random.default_rng(0))


def _can_make_semaphores(pool: SandboxPool) -> bool:
    isolation = pool.isolation
    assert isolation is not None
    return isolation.private_shm or not isolation.landlock


def _processes_marked(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:  # it ended meanwhile
            continue
    return found


@pytest.mark.parametrize("set_up", SET_UPS)
def test_an_evaluator_runs_the_program_with_the_interpreter_in_a_subprocess(
    problem: OpenEvolveProblem, pools: dict[str, SandboxPool], set_up: str
) -> None:
    result = evaluate(problem, pools[set_up], PROGRAM.format(mode="subprocess"))
    assert result.passed, result.error
    assert result.score == 2.5 and result.metrics["runs"] == 1.0


@pytest.mark.parametrize("mode", MULTIPROCESSING)
@pytest.mark.parametrize("set_up", SET_UPS)
def test_an_evaluator_uses_a_multiprocessing_pool_or_a_process_and_a_queue(
    problem: OpenEvolveProblem, pools: dict[str, SandboxPool], set_up: str, mode: str
) -> None:
    pool = pools[set_up]
    result = evaluate(problem, pool, PROGRAM.format(mode=mode))
    if not _can_make_semaphores(pool):
        # A worker that is not root has no /dev/shm of its own, and Landlock keeps the shared
        # one out of reach: the evaluator fails with its traceback, it is not a crash.
        assert not result.passed and result.error is not None
        assert "PermissionError" in result.error, result.error
        assert "multiprocessing needs POSIX semaphores in /dev/shm" in result.error
        return
    assert result.passed, result.error
    assert result.score == 2.5 and result.metrics["runs"] == (1.0 if mode == "queue" else 4.0)


@pytest.mark.parametrize("set_up", SET_UPS)
def test_an_evaluator_that_runs_another_program_is_told_what_the_sandbox_allows(
    problem: OpenEvolveProblem, pools: dict[str, SandboxPool], set_up: str
) -> None:
    pool = pools[set_up]
    result = evaluate(problem, pool, PROGRAM.format(mode="shell"))
    isolation = pool.isolation
    assert isolation is not None
    if not isolation.landlock:
        assert result.passed, result.error  # without Landlock a shell runs, held like the rest
        return
    assert not result.passed and result.error is not None
    assert result.error.startswith("exception: evaluate raised PermissionError")
    assert "execute only the interpreter, sys.executable" in result.error


@pytest.mark.parametrize("set_up", SET_UPS)
def test_nothing_an_evaluator_leaves_in_dev_shm_reaches_the_next_call(
    problem: OpenEvolveProblem, pools: dict[str, SandboxPool], set_up: str
) -> None:
    pool = pools[set_up]
    if not (pool.isolation and pool.isolation.private_shm):
        pytest.skip(f"no /dev/shm of the server's own in this set-up: {pool.isolation}")
    before = set(os.listdir("/dev/shm"))
    for _ in range(2):
        result = evaluate(problem, pool, PROGRAM.format(mode="shm_left"))
        assert result.passed, result.error
        assert result.metrics["seen"] == 0.0  # empty: the first call's file is gone
    assert set(os.listdir("/dev/shm")) == before  # the worker's own /dev/shm never saw it


def test_a_program_that_outlives_the_evaluators_timeout_is_killed_with_its_call(
    problem: OpenEvolveProblem, pools: dict[str, SandboxPool]
) -> None:
    marker = f"codevolve-marker-{uuid.uuid4().hex}"
    pool = pools["all_layers"]
    caught = evaluate(problem, pool, PROGRAM.format(mode="hang_caught").replace("MARKER", marker))
    assert caught.passed and caught.feedback.count("the program timed out") == 1
    # The evaluator waits longer than its own wall limit: the sandbox kills it and the program.
    limits = SandboxLimits(wall_s=1.5, cpu_s=5.0, memory_mb=512)
    source = PROGRAM.format(mode="hang").replace("MARKER", marker)
    hung = SandboxedCandidate(source, limits=limits, pool=pool)
    timed_out = problem.stages[0].run(hung, np.random.default_rng(0))
    assert timed_out.error is not None and timed_out.error.startswith("timeout:")
    deadline = time.monotonic() + 5.0
    while _processes_marked(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _processes_marked(marker) == []
