"""Problems by name, wherever they live: the one place every process looks a problem up.

A name is a built-in problem of the registry or an uploaded bundle, ``bundle:<sha256>`` (a folder
in the OpenEvolve layout, stored in the ``bundles`` table). Each process that needs a problem has
one entry here:

- :func:`cached_problem`: a built-in problem, or a bundle this process loaded; built once per
  process (the embedded run and its workers, the API, the command line).
- :func:`prepare_problem`: the embedded run, before its job is written: a built-in name is
  checked, a bundle loaded from a folder is stored, a stored one is read back.
- :func:`stored_problem`: the supervisor: a job's problem, and a bundle's files for the workers.
- :class:`ProblemResolver`: a distributed worker: built-in problems, then bundles read from Redis.

A bundle's evaluator is never imported here: its files are written under a cache directory and
handed to the OpenEvolve-format loader, and only the sandbox runs the evaluator.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import redis as redis_sync
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from codevolve.core.errors import ConfigError
from codevolve.core.problem import Problem
from codevolve.evaluator_workers.redis_bundles import bundle_id_of, fetch_bundle
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.problems.openevolve import loaded_problem, make_bundle, problem_of
from codevolve.problems.openevolve.bundle import NAME_PREFIX
from codevolve.problems.registry import get_problem
from codevolve.program_db.bundles import get_bundle, store_bundle

LOADER_MODULE = "codevolve.problems.openevolve"
LOADER_NAMES = ("load_problem", "load_bundle", "load")  # the first one the module defines is used
LOCAL_OWNER = "local"  # the owner of bundles stored by the command line


def is_bundle_name(problem: str) -> bool:
    return problem.startswith(NAME_PREFIX)


@functools.cache
def cached_problem(name: str) -> Problem:
    """Problems are immutable and some precompute tables: build each once per process.

    A bundle (``bundle:<sha256>``) resolves to the problem this process loaded for its job."""
    if is_bundle_name(name):
        problem = loaded_problem(name)
        if problem is None:
            raise ConfigError(f"{name}: this process has not loaded that bundle")
        return problem
    return get_problem(name)


async def prepare_problem(session: AsyncSession, name: str, *, owner: str = LOCAL_OWNER) -> None:
    """Make the job's problem resolvable in this process; a bundle is also stored.

    A bundle this process loaded (from a folder) is stored, once per content; one it has not is
    read from the database. Built-in names are checked, listing the known ones when unknown.
    """
    if not is_bundle_name(name):
        get_problem(name)
        return
    problem = loaded_problem(name)
    if problem is not None:
        files = problem.bundle.files
        await store_bundle(session, identity=problem.bundle.id, owner=owner, files=files)
        return
    stored = await get_bundle(session, name)
    if stored is None:
        raise ConfigError(f"{name}: no such bundle in this database")
    bundle = make_bundle(stored.files)
    if bundle.name != name:
        raise ConfigError(f"{name}: the stored files hash to {bundle.id}; the bundle is corrupt")
    problem_of(bundle)


async def stored_problem(
    sessions: async_sessionmaker[AsyncSession], name: str, cache: Path
) -> tuple[Problem, dict[str, bytes]]:
    """A job's problem as the supervisor runs it, and for a bundle its files (workers get them
    through Redis); a bundle's files are written under ``cache``. Building a problem may
    precompute tables, so it runs in a thread, off the event loop."""
    bundle = bundle_id_of(name)
    if bundle is None:
        return await asyncio.to_thread(cached_problem, name), {}
    async with sessions() as session:
        stored = await get_bundle(session, bundle)
    if stored is None:
        raise ConfigError(f"{name}: no such bundle in the database")
    files = dict(stored.files)
    return await asyncio.to_thread(load_bundle_problem, bundle, files, cache), files


def write_bundle(files: Mapping[str, bytes], directory: Path) -> Path:
    """Write the files under ``directory``; paths must stay inside it.

    Each file is written beside its place and renamed into it: the jobs of one bundle start at
    once and write the same folder from several threads, and a reader must never find a file
    truncated by another job's write (it read an empty ``evaluator.py`` and failed the job)."""
    for name, data in files.items():
        relative = PurePosixPath(name)
        if relative.is_absolute() or ".." in relative.parts or not relative.parts:
            raise ConfigError(f"bundle file {name!r} escapes the bundle folder")
        target = directory.joinpath(*relative.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}.partial")
        partial.write_bytes(data)
        os.replace(partial, target)  # atomic: the old file or the new one, never half of one
    return directory


def load_bundle_problem(bundle_id: str, files: Mapping[str, bytes], cache: Path) -> Problem:
    """The Problem of a bundle, loaded from its files by the OpenEvolve-format loader."""
    try:
        module = importlib.import_module(LOADER_MODULE)
    except ImportError as exc:
        raise ConfigError(
            f"bundle:{bundle_id}: this installation cannot load bundles ({LOADER_MODULE}: {exc})"
        ) from exc
    loader: Callable[[Path], Any] | None = next(
        (getattr(module, n) for n in LOADER_NAMES if callable(getattr(module, n, None))), None
    )
    if loader is None:
        raise ConfigError(f"bundle:{bundle_id}: {LOADER_MODULE} defines no problem loader")
    if not files:
        raise ConfigError(f"bundle:{bundle_id}: no files (not uploaded, or not published)")
    directory = write_bundle(files, cache / bundle_id)
    problem: Problem = loader(directory)
    return problem


class ProblemResolver:
    """A worker's ``resolve_problem``: built-in problems first, then bundles read from Redis.

    Called from evaluation threads, so it is thread-safe and uses a blocking Redis client; each
    problem is built once per process.
    """

    def __init__(self, redis_url: str | None, keys: RedisKeys, cache: Path | None = None) -> None:
        self._client = (
            None
            if redis_url is None
            else redis_sync.Redis.from_url(redis_url, decode_responses=True)
        )
        self._keys = keys
        self._cache = cache or Path(tempfile.mkdtemp(prefix="codevolve-bundles-"))
        self._problems: dict[str, Problem] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> Problem:
        with self._lock:
            problem = self._problems.get(name)
            if problem is None:
                problem = self._problems[name] = self._load(name)
            return problem

    def _load(self, name: str) -> Problem:
        bundle = bundle_id_of(name)
        if bundle is None:
            return get_problem(name)
        if self._client is None:
            raise ConfigError(f"{name}: bundles reach workers through Redis; none is configured")
        return load_bundle_problem(
            bundle, fetch_bundle(self._client, self._keys, bundle), self._cache
        )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
