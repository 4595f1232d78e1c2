"""The re-measure of a program: its verdict, confirmed figure and details.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATE = sa.String(16)


def upgrade() -> None:
    with op.batch_alter_table("programs") as batch:
        batch.add_column(sa.Column("verdict", STATE, nullable=True))
        batch.add_column(sa.Column("confirmed_score", sa.Float(), nullable=True))
        batch.add_column(sa.Column("remeasure", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("programs") as batch:
        batch.drop_column("remeasure")
        batch.drop_column("confirmed_score")
        batch.drop_column("verdict")
