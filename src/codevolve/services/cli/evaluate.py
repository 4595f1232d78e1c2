"""``codevolve evaluate``: run one program file through its problem's cascade, here.

The program runs in the same sandbox the workers use; nothing is written to a database.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from codevolve.core.codec import stage_to_dict
from codevolve.core.config import SandboxLimits
from codevolve.core.errors import ConfigError
from codevolve.core.task import Task
from codevolve.evaluator_workers.cascade import SandboxedCandidate, run_cascade
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.problems.gemm_tiling import report as gemm_report
from codevolve.problems.gemm_tiling.errors import GemmTilingError
from codevolve.problems.gemm_tiling.shapes import GemmShape
from codevolve.problems.registry import get_problem

GEMM_PROBLEMS = ("gemm-tiling",)


def evaluate_file(
    *, problem: str, program: Path, shapes: Path | None = None, seed: int = 0
) -> dict[str, Any]:
    """The cascade's verdict on ``program``; for gemm a per-shape table too (default: the 88).

    ``shapes`` is a JSON file of ``[M, N, K]`` lists. Inputs that cannot be used raise
    ConfigError naming the option; a program that fails is a verdict (``status``), not an error."""
    source = _read_program(program)
    spec = get_problem(problem)
    if shapes is not None and problem not in GEMM_PROBLEMS:
        raise ConfigError(f"--shapes applies to {', '.join(GEMM_PROBLEMS)} only, not {problem}")
    parsed = read_shapes(shapes) if shapes is not None else None
    limits = SandboxLimits()
    with SandboxPool(size=1) as pool:
        task = Task(
            program_id="file", job_id="-", problem=problem, source=source, seed=seed, limits=limits
        )
        evaluation = run_cascade(spec, task, pool, worker="cli")
        result: dict[str, Any] = {
            "problem": problem,
            "program": str(program),
            "status": evaluation.status.value,
            "score": evaluation.score,
            "error": evaluation.error,
            "stages": [stage_to_dict(s) for s in evaluation.stages],
        }
        if problem in GEMM_PROBLEMS:
            candidate = SandboxedCandidate(source, limits=limits, pool=pool)
            result.update(gemm_report.shape_report(candidate, parsed))
    return result


def _read_program(program: Path) -> str:
    if not program.is_file():
        raise ConfigError(f"--program {program}: no such file")
    try:
        return program.read_text()
    except UnicodeDecodeError:
        raise ConfigError(f"--program {program}: not a text (UTF-8) file") from None


def read_shapes(path: Path) -> list[GemmShape]:
    """The shapes of a ``--shapes`` file: a JSON list of ``[M, N, K]`` (positive ints)."""
    if not path.is_file():
        raise ConfigError(f"--shapes {path}: no such file")
    try:
        data = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise ConfigError(f"--shapes {path}: not a text file of JSON") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--shapes {path}: not JSON ({exc.msg}, line {exc.lineno}); "
            "expected a list of [M, N, K], e.g. [[16, 4096, 4096]]"
        ) from None
    try:
        return gemm_report.parse_shapes(data)
    except GemmTilingError as exc:
        raise ConfigError(f"--shapes {path}: {exc}, e.g. [[16, 4096, 4096]]") from None
