"""The example problems: each initial program passes its cascade, and known-bad programs fail it
(the circle-packing validator refuses NaN, overlaps, circles outside the square, wrong counts)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codevolve.core.config import SandboxLimits
from codevolve.core.program import Evaluation, ProgramStatus
from codevolve.core.task import Task
from codevolve.evaluator_workers.cascade import run_cascade
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.problems.examples import example_dir
from codevolve.problems.openevolve import OpenEvolveProblem, load_folder

# Valid unless a test changes it: a 5 x 5 grid plus one tiny circle in a corner gap.
GRID = """\
def construct_packing():
    centers = [(0.1 + 0.2 * (k % 5), 0.1 + 0.2 * (k // 5)) for k in range(25)]
    radii = [0.1] * 25
    centers.append((0.2, 0.2))
    radii.append(0.0414)
    return centers, radii
"""


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(size=1) as running:
        yield running


def evaluate(name: str, source: str, pool: SandboxPool) -> Evaluation:
    problem = OpenEvolveProblem(load_folder(example_dir(name)))
    task = Task(
        program_id="p",
        job_id="j",
        problem=problem.name,
        source=source,
        seed=0,
        limits=SandboxLimits(wall_s=20, cpu_s=20),
    )
    return run_cascade(problem, task, pool, worker="test")


def test_the_circle_packing_initial_program_passes_with_its_sum_of_radii(
    pool: SandboxPool,
) -> None:
    initial = load_folder(example_dir("circle_packing")).initial_program
    evaluation = evaluate("circle_packing", initial, pool)
    assert evaluation.status is ProgramStatus.EVALUATED
    assert evaluation.score == pytest.approx(2.356)
    assert evaluation.metrics["sum_radii"] == pytest.approx(2.356)
    assert "sum of radii 2.356000" in evaluation.feedback


def test_a_tight_valid_packing_passes(pool: SandboxPool) -> None:
    evaluation = evaluate("circle_packing", GRID, pool)
    assert evaluation.status is ProgramStatus.EVALUATED
    assert evaluation.score == pytest.approx(2.5414)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("radii[25] = float('nan')", "radius 25 is nan"),
        ("radii[0] = 0.1001", "circles 0 and 1 overlap"),
        ("centers[0] = (0.05, 0.1)", "leaves the square"),
        ("radii[3] = -0.01", "negative radius"),
        ("centers.pop(); radii.pop()", "expected 26 centers"),
        ("radii[2] = True", "radius 2 is True"),
    ],
)
def test_invalid_packings_are_rejected_at_stage_one(
    pool: SandboxPool, change: str, reason: str
) -> None:
    source = GRID.replace("    return centers, radii", f"    {change}\n    return centers, radii")
    evaluation = evaluate("circle_packing", source, pool)
    assert evaluation.status is ProgramStatus.REJECTED
    assert [s.stage for s in evaluation.stages] == ["stage1"]
    assert reason in evaluation.feedback


def test_the_function_minimisation_initial_program_passes_both_stages(pool: SandboxPool) -> None:
    initial = load_folder(example_dir("function_minimization")).initial_program
    evaluation = evaluate("function_minimization", initial, pool)
    assert evaluation.status is ProgramStatus.EVALUATED
    assert [s.stage for s in evaluation.stages] == ["stage1", "stage2"]
    assert 0.3 < (evaluation.score or 0.0) < 0.6
    assert "found_rate" in evaluation.features


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("    return (9.0, 0.0)", "outside the search square"),
        ("    while True:\n        objective(0.0, 0.0)", "more than 2000 calls"),
    ],
)
def test_cheating_minimisers_fail(pool: SandboxPool, body: str, error: str) -> None:
    source = f"def search_minimum(objective, seed):\n{body}\n"
    evaluation = evaluate("function_minimization", source, pool)
    assert evaluation.status is ProgramStatus.FAILED
    assert error in (evaluation.error or "")
