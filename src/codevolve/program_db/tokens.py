"""Bearer tokens of the REST API.

A token is shown once, when it is created; only its sha256 is stored, so a copy of the database
does not let anyone call the API. Every function takes the caller's session and never commits.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Executable, bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.program_db.models import ApiTokenRow, utcnow
from codevolve.program_db.sql import as_utc, table_of

TOKEN_PREFIX = "cv_"  # makes a leaked token recognisable to secret scanners
TOKEN_BYTES = 32  # of randomness, before url-safe base64


@dataclass(frozen=True, slots=True)
class ApiToken:
    """What the API knows about a token; never the token itself."""

    id: str
    owner: str
    can_upload: bool  # may upload problem bundles, whose evaluators run on workers
    created_at: datetime
    revoked_at: datetime | None = None


def hash_token(token: str) -> str:
    """The stored form of a token: sha256 hex of its UTF-8 bytes."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _to_token(row: ApiTokenRow) -> ApiToken:
    return ApiToken(
        id=row.id,
        owner=row.owner,
        can_upload=row.can_upload,
        created_at=as_utc(row.created_at),
        revoked_at=None if row.revoked_at is None else as_utc(row.revoked_at),
    )


async def create_token(
    session: AsyncSession, *, owner: str, can_upload: bool = False
) -> tuple[ApiToken, str]:
    """A new token of ``owner``: its record, and the secret (returned here only)."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)
    token = ApiToken(id=uuid.uuid4().hex, owner=owner, can_upload=can_upload, created_at=utcnow())
    await session.execute(
        insert(ApiTokenRow).values(
            id=token.id,
            owner=owner,
            token_hash=hash_token(secret),
            can_upload=can_upload,
            created_at=token.created_at,
        )
    )
    return token, secret


async def find_token(session: AsyncSession, secret: str) -> ApiToken | None:
    """The live (not revoked) token whose secret this is."""
    found = await session.execute(_live_token_statement(), {"t_hash": hash_token(secret)})
    row = found.first()
    if row is None:
        return None
    return ApiToken(
        id=row.id,
        owner=row.owner,
        can_upload=row.can_upload,
        created_at=as_utc(row.created_at),
    )


@functools.cache
def _live_token_statement() -> Executable:
    """The lookup behind every API request that is not answered from the API's token cache:
    built once, a Core select (no ORM row, no identity map)."""
    tokens = table_of(ApiTokenRow)
    return select(tokens.c.id, tokens.c.owner, tokens.c.can_upload, tokens.c.created_at).where(
        tokens.c.token_hash == bindparam("t_hash"), tokens.c.revoked_at.is_(None)
    )


async def list_tokens(session: AsyncSession, *, owner: str | None = None) -> list[ApiToken]:
    """Tokens, oldest first; only ``owner``'s when given."""
    query = select(ApiTokenRow).order_by(ApiTokenRow.created_at, ApiTokenRow.id)
    if owner is not None:
        query = query.where(ApiTokenRow.owner == owner)
    return [_to_token(row) for row in await session.scalars(query)]


async def revoke_token(session: AsyncSession, token_id: str) -> bool:
    """Revoke a live token; False when there is no such live token."""
    revoked = await session.scalar(
        update(ApiTokenRow)
        .where(ApiTokenRow.id == token_id, ApiTokenRow.revoked_at.is_(None))
        .values(revoked_at=utcnow())
        .returning(ApiTokenRow.id)
        .execution_options(synchronize_session=False)
    )
    return revoked is not None
