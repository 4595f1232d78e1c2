"""The launch store's reads and writes (core/launch_store.py; docs/launch-store.md).

Written only from the judge's replies, as the controller applies evaluations; read when a
program's GPU stages are queued, for the launches its source is proven to take. The latest timing
of a key wins: a re-measure of a would-be best refreshes the launches it timed.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.launch_store import LaunchKey, StoredTiming
from codevolve.program_db.models import LaunchTimingRow, utcnow
from codevolve.program_db.sql import as_utc, dialect_insert

UPDATED = ("t_us", "cublas_us", "samples", "job_id", "program_id", "measured_at")
KEY_CHUNK = 200  # kernel hashes per query


async def record_timings(session: AsyncSession, timings: Sequence[StoredTiming]) -> None:
    """Store each timing under its key, GPU model and harness (one upsert; the latest wins)."""
    latest = {(t.key, t.gpu, t.harness): t for t in timings}
    if not latest:
        return
    now = utcnow()
    insert = dialect_insert(session, LaunchTimingRow).values(
        [
            {
                "kernel_hash": t.key.kernel_hash,
                "launch": t.key.launch,
                "case_key": t.key.case,
                "gpu": t.gpu,
                "harness": t.harness,
                "t_us": t.t_us,
                "cublas_us": t.cublas_us,
                "samples": t.samples,
                "job_id": t.job_id,
                "program_id": t.program_id,
                "measured_at": t.measured_at or now,
            }
            for t in latest.values()
        ]
    )
    await session.execute(
        insert.on_conflict_do_update(
            index_elements=["kernel_hash", "launch", "case_key", "gpu", "harness"],
            set_={name: insert.excluded[name] for name in UPDATED},
        )
    )


async def stored_timings(
    session: AsyncSession,
    keys: Sequence[LaunchKey],
    *,
    gpu: str | None = None,
    harness: str | None = None,
) -> list[StoredTiming]:
    """The timings held for ``keys``, of one GPU model and harness version where given (else of
    every one: the stage keeps those of its device)."""
    wanted = set(keys)
    hashes = sorted({k.kernel_hash for k in wanted})
    launches = sorted({k.launch for k in wanted})
    cases = sorted({k.case for k in wanted})
    found: list[StoredTiming] = []
    for start in range(0, len(hashes), KEY_CHUNK):
        query = select(LaunchTimingRow).where(
            LaunchTimingRow.kernel_hash.in_(hashes[start : start + KEY_CHUNK]),
            LaunchTimingRow.launch.in_(launches),
            LaunchTimingRow.case_key.in_(cases),
        )
        if gpu is not None:
            query = query.where(LaunchTimingRow.gpu == gpu)
        if harness is not None:
            query = query.where(LaunchTimingRow.harness == harness)
        for row in (await session.scalars(query)).all():
            key = LaunchKey(kernel_hash=row.kernel_hash, launch=row.launch, case=row.case_key)
            if key in wanted:
                found.append(_timing(row, key))
    return found


def _timing(row: LaunchTimingRow, key: LaunchKey) -> StoredTiming:
    return StoredTiming(
        key=key,
        gpu=row.gpu,
        harness=row.harness,
        t_us=row.t_us,
        cublas_us=row.cublas_us,
        samples=row.samples,
        job_id=row.job_id,
        program_id=row.program_id,
        measured_at=as_utc(row.measured_at),
    )
