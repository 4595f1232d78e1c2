"""KernelBench jobs as a run leaves them, written straight to the database (no GPU, no judge):
the problem's bundle, its job, the initial program and, optionally, a faster evolved best."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.config import RunConfig
from codevolve.core.job import JobState
from codevolve.core.program import Program, StageResult
from codevolve.problems.kernelbench import stages
from codevolve.problems.kernelbench.spec import make_spec, spec_files
from codevolve.problems.openevolve import make_bundle
from codevolve.program_db import repository
from codevolve.program_db.bundles import BUNDLE_PROBLEM_PREFIX
from tests.kernelbench_programs import TRITON_RELU
from tests.stored_programs import evaluated_program

RELU = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""
EAGER_MS = 0.04
COMPILE_MS = 0.03
COMPILE_SECONDS = 12.5
COMPILE_NOTE = "compile baseline failed: compiling Model raised AssertionError: no compile"


@dataclass(frozen=True, slots=True)
class KernelJob:
    job_id: str
    best_program_id: str


async def kernel_job(
    session: AsyncSession,
    *,
    owner: str,
    name: str,
    speedup: float | None = None,
    compiled: str = "timed",
) -> KernelJob:
    """A finished job of problem file ``name`` (the ReLU problem): its initial program evaluated
    and, with ``speedup``, a Triton program that many times faster than eager as its confirmed
    best; without it the best stays the initial program (speedup 1). ``compiled``: its compile
    baseline was ``timed`` (in :data:`COMPILE_SECONDS`), ``cached`` (timed, compiled from the
    cache) or ``failed`` (:data:`COMPILE_NOTE`)."""
    spec = make_spec(RELU, name=name)
    bundle = make_bundle(spec_files(spec))
    await repository.store_bundle(session, identity=bundle.id, owner=owner, files=bundle.files)
    config = RunConfig(problem=BUNDLE_PROBLEM_PREFIX + bundle.id, max_proposals=10)
    job = await repository.create_job(session, config, owner=owner)
    best = await _evaluated(session, job.id, spec.initial_program, ms=EAGER_MS, compiled=compiled)
    if speedup is not None:  # a Triton best: only its text matters here (no judge runs)
        ms = EAGER_MS / speedup
        best = await _evaluated(session, job.id, TRITON_RELU, ms=ms, index=0, compiled=compiled)
    await repository.set_job_best(session, job.id, best.id, EAGER_MS / best.metrics["candidate_ms"])
    await repository.set_job_state(session, job.id, JobState.DONE)
    return KernelJob(job_id=job.id, best_program_id=best.id)


async def _evaluated(
    session: AsyncSession, job_id: str, source: str, *, ms: float, compiled: str, index: int = -1
) -> Program:
    """A program of ``job_id`` judged correct at ``ms`` milliseconds per call."""
    metrics = {"candidate_ms": ms, "eager_ms": EAGER_MS}
    artifacts = {}
    if compiled == "failed":
        artifacts[stages.COMPILE_NOTE] = COMPILE_NOTE
    else:
        metrics.update(compile_ms=COMPILE_MS, compile_seconds=COMPILE_SECONDS)
        metrics["compile_cache_hit"] = float(compiled == "cached")
    stage = StageResult(
        stage="judge", passed=True, score=EAGER_MS / ms, metrics=metrics, artifacts=artifacts
    )
    program_id = await evaluated_program(
        session, job_id, source, stage, generation=0 if index < 0 else 1, proposal_index=index
    )
    stored = await repository.get_program(session, program_id)
    assert stored is not None
    return stored
