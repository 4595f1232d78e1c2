"""The launch store: timings per (kernel hash, launch, case, GPU model, harness version).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "launch_timings",
        sa.Column("kernel_hash", sa.String(64), nullable=False),
        sa.Column("launch", sa.String(500), nullable=False),
        sa.Column("case_key", sa.String(200), nullable=False),
        sa.Column("gpu", sa.String(200), nullable=False),
        sa.Column("harness", sa.String(200), nullable=False),
        sa.Column("t_us", sa.Float(), nullable=False),
        sa.Column("cublas_us", sa.Float(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("program_id", sa.String(32), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "kernel_hash", "launch", "case_key", "gpu", "harness", name="pk_launch_timings"
        ),
    )


def downgrade() -> None:
    op.drop_table("launch_timings")
