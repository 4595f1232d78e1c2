"""API tokens, uploaded problem bundles, and the prompt and answer of each proposal.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(32)  # uuid4 hex
HASH = sa.String(64)  # sha256 hex
NAME = sa.String(200)
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("proposals") as batch:
        batch.add_column(sa.Column("prompt", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("answer", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("prompt_variant", NAME, nullable=False, server_default=""))
    # The server defaults only fill existing rows; the models set the values from now on.
    with op.batch_alter_table("proposals") as batch:
        batch.alter_column("prompt", server_default=None)
        batch.alter_column("answer", server_default=None)
        batch.alter_column("prompt_variant", server_default=None)
    op.create_table(
        "api_tokens",
        sa.Column("id", ID, nullable=False),
        sa.Column("owner", NAME, nullable=False),
        sa.Column("token_hash", HASH, nullable=False),
        sa.Column("can_upload", sa.Boolean(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_table(
        "bundles",
        sa.Column("id", HASH, nullable=False),
        sa.Column("owner", NAME, nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bundles")),
    )


def downgrade() -> None:
    op.drop_table("bundles")
    op.drop_table("api_tokens")
    with op.batch_alter_table("proposals") as batch:
        batch.drop_column("prompt_variant")
        batch.drop_column("answer")
        batch.drop_column("prompt")
