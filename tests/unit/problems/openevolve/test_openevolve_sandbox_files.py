"""A bundle that passed the caps unpacks inside the sandbox (the file-size limit lets the harness
write files as large as a bundle may hold), while a candidate still cannot write a larger file."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from codevolve.core.config import SandboxLimits
from codevolve.core.problem import SandboxErrorKind
from codevolve.evaluator_workers import _cage
from codevolve.evaluator_workers.cascade import SandboxedCandidate
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.problems.openevolve import OpenEvolveProblem, make_bundle
from codevolve.problems.openevolve.bundle import MAX_FILE_BYTES

LIMITS = SandboxLimits(wall_s=20.0, cpu_s=20.0)  # the default output cap (64 KiB)
EVALUATOR = b"""\
import os

def evaluate(program_path):
    with open(os.path.join("data", "weights.bin"), "rb") as handle:
        data = handle.read()
    return {"combined_score": float(len(data)), "last": float(data[-1])}
"""


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(size=1) as running:
        yield running


def test_the_sandbox_lets_a_call_write_files_as_large_as_a_bundle_file() -> None:
    assert _cage.FILE_BYTES >= MAX_FILE_BYTES


def test_a_data_file_of_the_largest_bundled_size_unpacks_and_is_read_in_the_sandbox(
    pool: SandboxPool,
) -> None:
    weights = bytes(MAX_FILE_BYTES - 1) + b"\x07"
    bundle = make_bundle(
        {
            "initial_program.py": b"X = 1\n",
            "evaluator.py": EVALUATOR,
            "data/weights.bin": weights,
        }
    )
    candidate = SandboxedCandidate("X = 1\n", limits=LIMITS, pool=pool)
    result = OpenEvolveProblem(bundle).stages[0].run(candidate, np.random.default_rng(0))
    assert result.error is None, result.error
    assert result.score == MAX_FILE_BYTES and result.metrics["last"] == 7


def test_a_candidate_still_cannot_write_a_file_larger_than_that(pool: SandboxPool) -> None:
    source = (
        "def f():\n"
        "    with open('huge.bin', 'wb') as out:\n"
        "        for _ in range(64):\n"
        "            out.write(bytes(1 << 20))\n"  # 64 MiB in all
        "    return 1\n"
    )
    reply = pool.call(source, "f", [[]], LIMITS)
    assert reply.error_kind is SandboxErrorKind.EXCEPTION
    assert "File too large" in reply.error
