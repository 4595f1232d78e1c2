"""Benchmark: the controller's two batched writes on Postgres, each in its one-statement form and in
the statements every backend runs, at batch sizes 1, 10 and 50.

- proposals: ``repository.write_proposals`` on a connection in autocommit (as the controller runs
  it) against the children's INSERT, the proposal log's INSERT and the counter's UPDATE in a
  transaction;
- results: ``repository.apply_evaluations`` (one guarded ``UPDATE .. FROM unnest``) against the
  locking read and the executemany UPDATE, each in a transaction.

Prints CPU time of this process per row and wall time per batch (the round trips), the two forms
interleaved batch by batch, in a database of its own (dropped at the end).

    python bench/db_batches.py [--pg postgresql://postgres@127.0.0.1:5432/test] [--rows 600]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from throughput import scratch_database  # bench/throughput.py, beside this script

from codevolve.core.config import RunConfig
from codevolve.core.program import (
    CellKey,
    Evaluation,
    Program,
    ProgramId,
    ProgramStatus,
    StageResult,
)
from codevolve.core.prompt import ProposalStatus
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, upgrade
from codevolve.program_db.programs import apply_with_statements
from codevolve.program_db.proposal_batches import write_with_statements

SIZES = (1, 10, 50)


def _child(job_id: str, index: int) -> tuple[Program, repository.ProposalEntry]:
    program = Program(
        id=uuid.uuid4().hex,
        job_id=job_id,
        source=f"def f(x):\n    return x * {index}\n" * 8,
        content_hash=uuid.uuid4().hex * 2,
        parent_id=None,
        island=index % 4,
        generation=1,
        proposal_index=index,
        status=ProgramStatus.PENDING,
        attempts=1,
        diff="<<<<<<< SEARCH\n...",
        proposer="simulated:bench",
    )
    entry = repository.ProposalEntry(
        index=index,
        parent_id=None,
        island=index % 4,
        proposer="simulated:bench",
        status=ProposalStatus.CHILD,
        program_id=program.id,
    )
    return program, entry


def _result(program: Program, index: int) -> Evaluation:
    stage = StageResult(
        stage="score",
        passed=True,
        score=index / 1000,
        metrics={"speedup": 1.0 + index / 1000, "valid": 1.0},
        features={"h": (index % 50) / 50},
    )
    return Evaluation(
        program_id=program.id,
        job_id=program.job_id,
        status=ProgramStatus.EVALUATED,
        stages=(stage,),
        worker="bench",
        duration_s=0.05,
    )


class _Clock:
    """CPU seconds and wall seconds spent inside ``timed`` calls, and the rows they wrote."""

    def __init__(self) -> None:
        self.cpu = self.wall = 0.0
        self.rows = self.batches = 0

    async def timed(self, rows: int, call: Callable[[], Awaitable[object]]) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        await call()
        self.cpu += time.process_time() - cpu
        self.wall += time.perf_counter() - wall
        self.rows += rows
        self.batches += 1

    def line(self) -> str:
        return (
            f"{self.cpu / self.rows * 1000:.3f} ms CPU per row, "
            f"{self.wall / self.batches * 1000:.2f} ms wall per batch"
        )


Results = dict[ProgramId, tuple[Evaluation, CellKey | None]]
Call = Callable[[], Awaitable[object]]


def _forms(
    single: bool,
    sessions: async_sessionmaker[AsyncSession],
    autocommit: AsyncEngine,
    job_id: str,
    children: list[Program],
    entries: list[repository.ProposalEntry],
    results: Results,
) -> tuple[Call, Call]:
    """``single``: the controller's (the proposals in autocommit, the results in one UPDATE);
    otherwise every backend's (the statements, in a transaction each)."""

    async def write() -> None:
        if single:
            async with autocommit.connect() as target:
                await repository.write_proposals(target, job_id, children, entries)
        else:
            async with sessions.begin() as session:
                await write_with_statements(session, job_id, children, entries)

    async def apply() -> None:
        async with sessions.begin() as session:
            if single:
                await repository.apply_evaluations(session, list(results.values()))
            else:
                await apply_with_statements(session, results)

    return write, apply


async def main(pg: str, rows: int) -> None:
    async with scratch_database(pg) as scratch:
        engine = create_engine(scratch.url)
        try:
            await _measure(engine, rows)
        finally:
            await engine.dispose()


async def _measure(engine: AsyncEngine, rows: int) -> None:
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    await upgrade(engine)
    sessions = session_factory(engine)
    async with sessions.begin() as session:
        job = await repository.create_job(session, RunConfig(problem="bench"))
    index = 0
    print(f"postgres batch writes ({rows} rows per form and size)")
    for size in SIZES:
        one = {"proposals": _Clock(), "results": _Clock()}
        many = {"proposals": _Clock(), "results": _Clock()}
        for _ in range(max(1, rows // size)):
            for clocks, single in ((one, True), (many, False)):
                batch = [_child(job.id, index + i) for i in range(size)]
                index += size
                children = [program for program, _entry in batch]
                entries = [entry for _program, entry in batch]
                results: Results = {
                    program.id: (_result(program, i), (i % 50,))
                    for i, program in enumerate(children)
                }
                write, apply = _forms(
                    single, sessions, autocommit, job.id, children, entries, results
                )
                await clocks["proposals"].timed(size, write)
                await clocks["results"].timed(size, apply)
        for kind in ("proposals", "results"):
            print(
                f"  {kind:>9}, batches of {size:>2}: one statement {one[kind].line()}; "
                f"statements {many[kind].line()}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--rows", type=int, default=600, help="rows per form and batch size")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.pg, arguments.rows))
