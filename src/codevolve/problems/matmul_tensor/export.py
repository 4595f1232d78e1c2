"""``codevolve export JOB [--format decompositions] [--json] [--out FILE]``: the best verified
decompositions of a matmul-tensor job.

For every size, the lowest-rank decomposition any program of the job produced (the factors the
stages stored after exact verification), verified again here, written as U, V, W (integers or
exact fractions, [re, im] pairs if complex) with the readable algorithm: its R products and how
C is formed from them. Each algorithm is also run on random matrices and compared with A @ B.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from codevolve.core.errors import CodevolveError
from codevolve.core.export import Exported, ExportRecords
from codevolve.problems.matmul_tensor.algorithm import (
    Decomposition,
    check_on_random,
    is_exact,
    readable,
)

ARTIFACT_PREFIX = "factors_"
CHECK_SEED = 0
CHECK_TRIALS = 3
CHECK_LIMIT = 1e-8  # |C - A @ B| above this on random Gaussian matrices means a wrong algorithm


async def export_decompositions(records: ExportRecords, file: str) -> Exported:
    """The job's decompositions as text, and as JSON (``--json``, ``--out``)."""
    del file  # data: the file's name changes nothing in it
    document = await collect(records)
    return Exported(as_text(document), document=document)


async def collect(records: ExportRecords) -> dict[str, Any]:
    """The export document of one job: ``{"job", "problem", "sizes": {key: entry}}``."""
    job = records.job
    best: dict[str, tuple[Decomposition, str]] = {}
    async for program in records.programs():
        for name, text in program.artifacts.items():
            if not name.startswith(ARTIFACT_PREFIX):
                continue
            decomposition = Decomposition.from_json(text)
            key = name[len(ARTIFACT_PREFIX) :]
            held = best.get(key)
            if held is None or decomposition.rank < held[0].rank:
                best[key] = (decomposition, program.id)
    rng = np.random.default_rng(CHECK_SEED)
    sizes: dict[str, Any] = {}
    for key in sorted(best, key=lambda k: best[k][0].size):
        decomposition, program_id = best[key]
        if not is_exact(decomposition):  # never trust stored data blindly
            raise CodevolveError(f"stored factors for {key} of program {program_id} are not exact")
        error = check_on_random(decomposition, rng, trials=CHECK_TRIALS)
        if error > CHECK_LIMIT:
            raise CodevolveError(f"the {key} algorithm of program {program_id} is off by {error}")
        sizes[key] = {
            **decomposition.to_json(),
            "naive_rank": decomposition.size.naive_rank,
            "program_id": program_id,
            "algorithm": readable(decomposition),
            "random_check": {"trials": CHECK_TRIALS, "max_abs_error": error},
        }
    return {"job": job.id, "problem": job.config.problem, "sizes": sizes}


def as_text(document: dict[str, Any]) -> str:
    lines = [f"job {document['job']} ({document['problem']})"]  # a matmul-tensor job
    if not document["sizes"]:
        lines.append("no verified decomposition yet")
    for key, entry in document["sizes"].items():
        lines.append(
            f"\n<{key.replace('x', ',')}>: rank {entry['rank']} (naive {entry['naive_rank']})"
        )
        lines.extend(f"  {line}" for line in entry["algorithm"]["products"])
        lines.extend(f"  {line}" for line in entry["algorithm"]["outputs"])
    return "\n".join(lines)
