"""Small helpers the repository modules share: the dialect's INSERT (for upserts), timestamps and
JSON that both backends accept."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import cast

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.program_db.errors import ProgramDbError
from codevolve.program_db.models import Base

UpsertInsert = postgresql.Insert | sqlite.Insert


def table_of(model: type[Base]) -> Table:
    """The Core table of a model, for statements that bypass the ORM's unit of work."""
    return cast(Table, model.__table__)


def dialect_insert(session: AsyncSession, model: type[Base]) -> UpsertInsert:
    """``INSERT`` with ``ON CONFLICT`` support, for the backend the session is bound to."""
    return dialect_table_insert(session.get_bind().dialect.name, table_of(model))


def dialect_table_insert(dialect: str, table: Table) -> UpsertInsert:
    """``INSERT`` with ``ON CONFLICT`` support, for a backend by name (``postgresql``,
    ``sqlite``): for statements built once per backend and reused."""
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise ProgramDbError(f"unsupported database backend {dialect!r}: use SQLite or Postgres")


def as_utc(moment: datetime) -> datetime:
    """SQLite hands timestamps back without a zone; they were written in UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def finite_or_none(value: float | None) -> float | None:
    """A score column value: NaN ranks nowhere (and SQLite would store it as NULL anyway)."""
    return None if value is None or math.isnan(value) else value


def json_number(value: float) -> float | str:
    """Postgres' JSON rejects NaN and infinities: those travel as the strings ``float()`` reads."""
    return value if math.isfinite(value) else str(value)


def json_numbers(values: Mapping[str, float]) -> dict[str, float | str]:
    return {str(key): json_number(float(value)) for key, value in values.items()}


def numbers_from_json(values: Mapping[str, float | str]) -> dict[str, float]:
    return {str(key): float(value) for key, value in values.items()}
