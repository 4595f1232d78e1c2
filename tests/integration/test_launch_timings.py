"""The launch store in the program database: keys, the latest timing winning, and timings of
another GPU model or harness version refused."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.launch_store import LaunchKey, StoredTiming
from codevolve.program_db import repository

Sessions = async_sessionmaker[AsyncSession]
H100 = "NVIDIA H100 80GB HBM3"
HARNESS = "kernel.measure/1|torch 2.9|triton 3.6|cuda 12.8"


def _key(launch: str = "launch_tiled(x, w, y, GemmConfig(16, 64, 128, 4, 5, 1))") -> LaunchKey:
    return LaunchKey(kernel_hash="a" * 64, launch=launch, case="M=16 N=6144 K=4096")


def _timing(key: LaunchKey, t_us: float, **overrides: object) -> StoredTiming:
    values: dict[str, object] = {
        "key": key,
        "gpu": H100,
        "harness": HARNESS,
        "t_us": t_us,
        "cublas_us": 10.0,
        "samples": 10,
        "job_id": "j" * 32,
        "program_id": "p" * 32,
    }
    values.update(overrides)
    return StoredTiming(**values)  # type: ignore[arg-type]


async def test_a_timing_is_found_by_its_whole_key_and_the_latest_wins(sessions: Sessions) -> None:
    key, other = _key(), _key("launch_tiled(x, w, y, GemmConfig(16, 64, 64, 4, 5, 1))")
    async with sessions.begin() as session:
        await repository.record_timings(session, [_timing(key, 12.0)])
        await repository.record_timings(session, [_timing(key, 11.0, program_id="q" * 32)])
    async with sessions.begin() as session:
        found = await repository.stored_timings(session, [key, other])
    assert [(t.key, t.t_us, t.program_id, t.samples) for t in found] == [(key, 11.0, "q" * 32, 10)]
    assert found[0].measured_at is not None and found[0].measured_at.tzinfo is not None


async def test_another_gpu_model_or_harness_version_is_a_different_timing(
    sessions: Sessions,
) -> None:
    key = _key()
    async with sessions.begin() as session:
        await repository.record_timings(
            session,
            [
                _timing(key, 12.0),
                _timing(key, 9.0, gpu="NVIDIA H200"),
                _timing(key, 8.0, harness="kernel.measure/0|torch 2.8|triton 3.5|cuda 12.8"),
            ],
        )
    async with sessions.begin() as session:
        everything = await repository.stored_timings(session, [key])
        mine = await repository.stored_timings(session, [key], gpu=H100, harness=HARNESS)
        stale = await repository.stored_timings(
            session, [key], gpu=H100, harness="kernel.measure/2|torch 2.9|triton 3.6|cuda 12.8"
        )
    assert sorted(t.t_us for t in everything) == [8.0, 9.0, 12.0]
    assert [t.t_us for t in mine] == [12.0]
    assert stale == []


async def test_a_key_differing_in_any_part_finds_nothing(sessions: Sessions) -> None:
    key = _key()
    async with sessions.begin() as session:
        await repository.record_timings(session, [_timing(key, 12.0)])
    near = [
        LaunchKey(kernel_hash="b" * 64, launch=key.launch, case=key.case),
        LaunchKey(kernel_hash=key.kernel_hash, launch=key.launch + " ", case=key.case),
        LaunchKey(kernel_hash=key.kernel_hash, launch=key.launch, case="M=32 N=6144 K=4096"),
    ]
    async with sessions.begin() as session:
        assert await repository.stored_timings(session, near) == []
        assert await repository.stored_timings(session, []) == []


async def test_the_controller_writes_fresh_timings_and_sends_them_with_gpu_tasks_only(
    sessions: Sessions,
) -> None:
    from codevolve.core.program import Evaluation, ProgramStatus, StageResult
    from codevolve.core.task import Task
    from codevolve.problems.gemm_kernel_gpu.kernel_source import initial_program
    from codevolve.problems.gemm_kernel_gpu.problem import gemm_kernel_gpu_problem
    from codevolve.program_db.job_store import JobStore
    from codevolve.services.controller.launch_reuse import (
        keys_of,
        record_fresh_timings,
        with_stored_timings,
    )
    from tests.integration.conftest import run_config

    problem = gemm_kernel_gpu_problem()
    keys_fn = keys_of(problem)
    assert keys_fn is not None
    keys = keys_fn(initial_program())
    assert keys is not None and len(keys) > 50  # the probe, ragged and selection shapes
    async with sessions.begin() as session:
        job = await repository.create_job(session, run_config())
    store = JobStore(sessions, job.id)
    try:
        measured = tuple(_timing(key, 10.0, job_id="", program_id="") for key in keys[:5])
        stage = StageResult(stage="gpu", passed=True, score=1.0, launch_timings=measured)
        evaluation = Evaluation("p" * 32, job.id, ProgramStatus.EVALUATED, stages=(stage,))
        async with store.transaction() as unit:
            await record_fresh_timings(unit, [evaluation])
        task = Task("c" * 32, job.id, "gemm-kernel-gpu", initial_program(), seed=1)
        gpu_task = await with_stored_timings(
            Task(**{**_fields(task), "capability": "gpu"}), store, keys_fn
        )
        remeasure = await with_stored_timings(
            Task(**{**_fields(task), "capability": "gpu", "remeasure": 1}), store, keys_fn
        )
        cpu_task = await with_stored_timings(task, store, keys_fn)
    finally:
        await store.close()
    assert {t.key for t in gpu_task.stored_timings} == set(keys[:5])
    assert {(t.job_id, t.program_id) for t in gpu_task.stored_timings} == {(job.id, "p" * 32)}
    assert remeasure.stored_timings == () and cpu_task.stored_timings == ()


def _fields(task: object) -> dict[str, object]:
    import dataclasses

    return {f.name: getattr(task, f.name) for f in dataclasses.fields(task)}  # type: ignore[arg-type]
