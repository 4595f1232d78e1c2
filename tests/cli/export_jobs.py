"""Jobs as runs leave them, written straight to an SQLite file for ``codevolve export``: a
gemm-kernel-gpu job, a KernelBench job and gemm-tiling jobs, each with a confirmed best program
(no GPU, no judge: the figures are made up, the sources are real)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.config import RunConfig
from codevolve.core.job import JobState
from codevolve.core.program import StageResult
from codevolve.problems.kernelbench.spec import JudgeSettings, make_spec, spec_files
from codevolve.problems.openevolve import make_bundle
from codevolve.program_db import repository
from codevolve.program_db.bundles import BUNDLE_PROBLEM_PREFIX
from codevolve.program_db.engine import create_engine, session_factory
from tests.integration.conftest import run_sync
from tests.stored_programs import evaluated_program

DEVICE = "NVIDIA H200"
GPU_ARTIFACTS = {"device_index": "0", "device_name": DEVICE}
# What gemm-tiling's static stage records of a program it proved legal on every input.
PROVEN = {
    "legality": "proven",
    "legality_inputs": "452",
    "legality_note": "every return is a literal config, each judged launchable by the static check",
}
PROBLEM_FILE = "7_LinearReluScale"


def gemm_kernel_job(url: str, source: str | None, *, score: float = 1.0734) -> str:
    """A finished gemm-kernel-gpu job; with ``source``, its confirmed best program."""
    config = RunConfig(problem="gemm-kernel-gpu", max_proposals=10)
    metrics = {"vs_cublas": score, "vs_cublas_decode": 0.91, "vs_cublas_prefill": 1.02}
    return run_sync(_job(url, config, source, score, metrics))


def tiling_job(
    url: str, source: str | None, *, problem: str = "gemm-tiling", score: float = 1.0412
) -> str:
    """A finished gemm-tiling (or gemm-tiling-gpu) job; with ``source``, its confirmed best."""
    config = RunConfig(problem=problem, max_proposals=10)
    artifacts = {**PROVEN, **(GPU_ARTIFACTS if problem.endswith("-gpu") else {})}
    metrics = {"train_score": score}
    return run_sync(_job(url, config, source, score, metrics, artifacts=artifacts))


def kernelbench_job(
    url: str, *, reference: str, program: str | None, tolerance: float | None = None
) -> str:
    """A finished KernelBench job of problem file ``reference``; with ``program``, its best."""
    spec = make_spec(reference, name=PROBLEM_FILE, settings=JudgeSettings(tolerance=tolerance))
    bundle = make_bundle(spec_files(spec))
    metrics = {"candidate_ms": 0.02, "eager_ms": 0.05, "compile_ms": 0.03}
    config = RunConfig(problem=BUNDLE_PROBLEM_PREFIX + bundle.id, max_proposals=10)
    return run_sync(_job(url, config, program, 2.5, metrics, bundle=bundle.files))


async def _job(
    url: str,
    config: RunConfig,
    source: str | None,
    score: float,
    metrics: dict[str, float],
    *,
    bundle: Mapping[str, bytes] | None = None,
    artifacts: Mapping[str, str] = GPU_ARTIFACTS,
) -> str:
    engine = create_engine(url)
    try:
        async with session_factory(engine)() as session, session.begin():
            if bundle is not None:
                identity = config.problem.removeprefix(BUNDLE_PROBLEM_PREFIX)
                await repository.store_bundle(session, identity=identity, owner="", files=bundle)
            job = await repository.create_job(session, config, owner="")
            if source is not None:
                program_id = await _evaluated(session, job.id, source, score, metrics, artifacts)
                await repository.set_job_best(session, job.id, program_id, score)
            await repository.set_job_state(session, job.id, JobState.DONE)
            return job.id
    finally:
        await engine.dispose()


async def _evaluated(
    session: AsyncSession,
    job_id: str,
    source: str,
    score: float,
    metrics: dict[str, float],
    artifacts: Mapping[str, str],
) -> str:
    stage = StageResult(stage="gpu", passed=True, score=score, metrics=metrics, artifacts=artifacts)
    return await evaluated_program(session, job_id, source, stage, generation=1, proposal_index=0)
