"""Uploaded problem bundles, handed to workers through Redis.

Workers hold no database credentials, so the controller copies a job's bundle from the database to
``P:bundle:<sha256>`` (a hash: path -> base64 of the bytes) before enqueueing its tasks, and again
after Redis lost its data. Workers read it with a plain (blocking) client: they resolve problems in
their evaluation threads.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

import redis as redis_sync
from redis.asyncio import Redis

from codevolve.evaluator_workers.redis_keys import RedisKeys

BUNDLE_PREFIX = "bundle:"  # a job's problem name for an uploaded bundle: bundle:<sha256>


def bundle_id_of(problem: str) -> str | None:
    """The bundle id a problem name refers to, or None for a built-in problem."""
    return problem.removeprefix(BUNDLE_PREFIX) if problem.startswith(BUNDLE_PREFIX) else None


async def publish_bundle(
    redis: Redis, keys: RedisKeys, bundle_id: str, files: Mapping[str, bytes]
) -> None:
    """Make a bundle's files readable by workers (idempotent: the content is the id)."""
    key = keys.bundle(bundle_id)
    encoded = {path: base64.b64encode(data).decode("ascii") for path, data in files.items()}
    async with redis.pipeline(transaction=True) as pipe:
        pipe.delete(key)
        if encoded:
            pipe.hset(key, mapping=encoded)  # type: ignore[arg-type]
        await pipe.execute()


def fetch_bundle(client: redis_sync.Redis, keys: RedisKeys, bundle_id: str) -> dict[str, bytes]:
    """A bundle's files; empty when it was never published (or Redis lost it)."""
    raw = client.hgetall(keys.bundle(bundle_id))
    return {str(path): base64.b64decode(data) for path, data in raw.items()}
