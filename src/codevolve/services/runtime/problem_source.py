"""Problems by name, wherever they live: built-in ones, and uploaded bundles (``bundle:<sha256>``).

A bundle is a folder in the OpenEvolve layout; its files are written under a cache directory and
handed to the OpenEvolve-format loader (``codevolve.problems.openevolve``). Without that loader a
bundle problem fails with a clear reason instead of being guessed at.
"""

from __future__ import annotations

import importlib
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import redis as redis_sync

from codevolve.core.errors import ConfigError
from codevolve.core.problem import Problem
from codevolve.evaluator_workers.redis_bundles import bundle_id_of, fetch_bundle
from codevolve.evaluator_workers.redis_keys import RedisKeys
from codevolve.problems.registry import get_problem

LOADER_MODULE = "codevolve.problems.openevolve"
LOADER_NAMES = ("load_problem", "load_bundle", "load")  # the first one the module defines is used


def write_bundle(files: Mapping[str, bytes], directory: Path) -> Path:
    """Write the files under ``directory``; paths must stay inside it."""
    for name, data in files.items():
        relative = PurePosixPath(name)
        if relative.is_absolute() or ".." in relative.parts or not relative.parts:
            raise ConfigError(f"bundle file {name!r} escapes the bundle folder")
        target = directory.joinpath(*relative.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
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
