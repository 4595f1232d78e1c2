"""Problems looked up by name in one module (services/runtime/problems.py): built-in names, bundles
this process loaded, bundles stored in the database, and a worker's resolver."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.errors import ConfigError
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.problems.openevolve import make_bundle
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory, upgrade
from codevolve.services.runtime.problems import (
    ProblemResolver,
    cached_problem,
    stored_problem,
    write_bundle,
)

UNKNOWN_BUNDLE = "bundle:" + "0" * 64
FILES = {
    "initial_program.py": b"x = 1\n",
    "evaluator.py": b"def evaluate(path):\n    return {'combined_score': 1.0}\n",
}


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'lookup.sqlite'}")
    await upgrade(engine)
    try:
        yield session_factory(engine)
    finally:
        await engine.dispose()


def test_a_built_in_problem_is_built_once_per_process() -> None:
    assert cached_problem("gemm-tiling") is cached_problem("gemm-tiling")


def test_a_bundle_this_process_never_loaded_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="this process has not loaded that bundle"):
        cached_problem(UNKNOWN_BUNDLE)


def test_a_bundle_file_may_not_escape_its_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="escapes the bundle folder"):
        write_bundle({"../outside.py": b""}, tmp_path / "bundle")
    assert not (tmp_path / "outside.py").exists()


async def test_the_supervisor_gets_a_stored_bundle_with_its_files(
    sessions: async_sessionmaker[AsyncSession], tmp_path: Path
) -> None:
    bundle = make_bundle(FILES)
    async with sessions.begin() as session:
        await repository.store_bundle(session, identity=bundle.id, owner="o", files=bundle.files)
    problem, files = await stored_problem(sessions, bundle.name, tmp_path)
    assert problem.name == bundle.name and files == FILES
    built_in, none = await stored_problem(sessions, "gemm-tiling", tmp_path)
    assert built_in is cached_problem("gemm-tiling") and none == {}
    with pytest.raises(ConfigError, match="no such bundle in the database"):
        await stored_problem(sessions, UNKNOWN_BUNDLE, tmp_path)


def test_a_worker_without_redis_resolves_built_ins_and_refuses_bundles(tmp_path: Path) -> None:
    resolve = ProblemResolver(None, RedisKeys("t"), cache=tmp_path)
    assert resolve("gemm-tiling").name == "gemm-tiling"
    with pytest.raises(ConfigError, match="none is configured"):
        resolve(UNKNOWN_BUNDLE)
    resolve.close()


def test_a_bundle_written_again_while_read_is_never_seen_half_written(tmp_path: Path) -> None:
    # The jobs of one bundle start at once: each writes the same folder in its own thread while
    # another loads it. A reader must find the whole evaluator every time, never an empty file.
    evaluator = tmp_path / "evaluator.py"
    write_bundle(FILES, tmp_path)
    stop = threading.Event()

    def rewrite() -> None:
        while not stop.is_set():
            write_bundle(FILES, tmp_path)

    writers = [threading.Thread(target=rewrite) for _ in range(2)]
    for writer in writers:
        writer.start()
    try:
        reads = {evaluator.read_bytes() for _ in range(3000)}
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    assert reads == {FILES["evaluator.py"]}
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(FILES)  # no partial left
