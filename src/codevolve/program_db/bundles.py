"""Uploaded problem bundles (the OpenEvolve folder layout), stored by content.

A bundle's id is the sha256 of its files (paths and bytes, as the OpenEvolve loader hashes them),
so uploading the same files twice stores them once; a job names it as problem ``bundle:<id>``.
Files are kept as base64 in a JSON column, which both backends store without a binary type.
Every function takes the caller's session and never commits.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.program_db.models import BundleRow, utcnow
from codevolve.program_db.sql import as_utc, dialect_insert

BUNDLE_PROBLEM_PREFIX = "bundle:"  # a job's problem name for an uploaded bundle


@dataclass(frozen=True, slots=True)
class Bundle:
    id: str  # sha256 hex of the files
    owner: str
    files: Mapping[str, bytes]  # relative path -> content
    size_bytes: int  # sum of the files' sizes
    created_at: datetime

    @property
    def problem(self) -> str:
        return bundle_problem(self.id)


def bundle_problem(bundle_id: str) -> str:
    return BUNDLE_PROBLEM_PREFIX + bundle_id


async def store_bundle(
    session: AsyncSession, *, identity: str, owner: str, files: Mapping[str, bytes]
) -> None:
    """Store the files under ``identity`` (the loader's content hash), once per content.

    The first uploader stays the owner of a bundle; the id, not the owner, is what jobs name, and
    identical content is identical code whoever sent it.
    """
    await session.execute(
        dialect_insert(session, BundleRow)
        .values(
            id=identity,
            owner=owner,
            files={path: base64.b64encode(data).decode("ascii") for path, data in files.items()},
            size_bytes=sum(len(data) for data in files.values()),
            created_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["id"])
    )


async def get_bundle(session: AsyncSession, identity: str) -> Bundle | None:
    """A bundle by id, or by the problem name ``bundle:<id>`` a job stores."""
    identity = identity.removeprefix(BUNDLE_PROBLEM_PREFIX)
    row = await session.scalar(select(BundleRow).where(BundleRow.id == identity))
    if row is None:
        return None
    files = {str(path): base64.b64decode(data) for path, data in row.files.items()}
    return Bundle(
        id=row.id,
        owner=row.owner,
        files=MappingProxyType(files),
        size_bytes=row.size_bytes,
        created_at=as_utc(row.created_at),
    )
