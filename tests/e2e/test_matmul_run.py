"""matmul-tensor end to end on the embedded default: a small evolution run with short budgets,
then ``codevolve export`` of the verified factors, checked on random matrices."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from codevolve.core.config import RunConfig
from codevolve.core.problem import Problem, ProblemSpec
from codevolve.problems.matmul_tensor.algorithm import Decomposition, multiply
from codevolve.problems.matmul_tensor.problem import matmul_tensor_problem
from codevolve.services.cli import main
from codevolve.services.runtime import embedded as runtime

NAIVE_BODY = '''
def find_decomposition(n, m, p, rank, seed, time_budget_s):
    """The schoolbook algorithm: exact at the naive rank."""
    rows = (n * m, m * p, p * n)
    U, V, W = ([[0] * (n * m * p) for _ in range(d)] for d in rows)
    r = 0
    for i in range(n):
        for j in range(m):
            for k in range(p):
                U[i * m + j][r] = V[j * p + k][r] = W[k * n + i][r] = 1
                r += 1
    return [U, V, W]
'''


def _schoolbook(problem: ProblemSpec) -> ProblemSpec:
    """The problem starting from an exact program, so that the export has something in every
    size."""
    source = problem.initial_program
    start = source.index("def find_decomposition(")
    end = source.index("# EVOLVE-BLOCK-END")
    initial = source[:start] + NAIVE_BODY.lstrip("\n") + "\n\n" + source[end:]
    return dataclasses.replace(problem, initial_program=initial)


@pytest.mark.slow
def test_small_run_then_export_of_verified_algorithms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    problem = _schoolbook(matmul_tensor_problem(budget_scale=0.05))

    def resolve(name: str) -> Problem:
        assert name == "matmul-tensor"
        return problem

    monkeypatch.setattr(runtime, "cached_problem", resolve)
    db = tmp_path / "run.sqlite"
    config = RunConfig(problem="matmul-tensor", seed=0, max_proposals=3, max_in_flight=2)
    result = asyncio.run(runtime.run_embedded(db_url=f"sqlite+aiosqlite:///{db}", config=config))
    assert result.state.value == "done"
    assert result.report["proposals"] == 3
    assert result.report["evaluated"] >= 1

    capsys.readouterr()
    assert main(["export", result.job_id, "--json", "--db", str(db)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["problem"] == "matmul-tensor"
    assert set(document["sizes"]) >= {"2x2x2", "3x3x3", "4x4x4"}
    entry = document["sizes"]["3x3x3"]
    assert entry["rank"] <= 27 and entry["random_check"]["max_abs_error"] < 1e-9
    assert len(entry["algorithm"]["products"]) == entry["rank"]
    assert len(entry["algorithm"]["outputs"]) == 9
    alg = Decomposition.from_json(entry)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    assert np.allclose(multiply(alg, a, b), a @ b)

    assert main(["export", result.job_id, "--db", str(db)]) == 0
    assert "h1 = (" in capsys.readouterr().out
