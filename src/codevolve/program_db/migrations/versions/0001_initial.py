"""Initial schema: jobs, programs, proposals, islands, elites, best cases.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

Written by hand from ``codevolve.program_db.models``; constraint names follow its naming
convention (``op.f`` marks them final). The migration test compares the result with the models on
SQLite and Postgres.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(32)  # uuid4 hex
NAME = sa.String(200)
STATE = sa.String(16)
CELL = sa.String(64)
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", ID, nullable=False),
        sa.Column("owner", NAME, nullable=False),
        sa.Column("problem", NAME, nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("state", STATE, nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("proposals", sa.Integer(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("best_program_id", ID, nullable=True),
        sa.Column("best_score", sa.Float(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_table(
        "islands",
        sa.Column("job_id", ID, nullable=False),
        sa.Column("island", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_islands_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "island", name=op.f("pk_islands")),
    )
    op.create_table(
        "programs",
        sa.Column("id", ID, nullable=False),
        sa.Column("job_id", ID, nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("parent_id", ID, nullable=True),
        sa.Column("island", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("proposal_index", sa.Integer(), nullable=False),
        sa.Column("status", STATE, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("diff", sa.Text(), nullable=False),
        sa.Column("proposer", NAME, nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("stage_scores", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("heldout", sa.JSON(), nullable=False),
        sa.Column("features", sa.JSON(), nullable=False),
        sa.Column("cell", CELL, nullable=True),
        sa.Column("cases", sa.JSON(), nullable=False),
        sa.Column("feedback", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("artifacts", sa.JSON(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("evaluated_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_programs_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["programs.id"],
            name=op.f("fk_programs_parent_id_programs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_programs")),
        sa.UniqueConstraint("job_id", "content_hash", name=op.f("uq_programs_job_id_content_hash")),
    )
    op.create_index(
        op.f("ix_programs_job_id_status_score"), "programs", ["job_id", "status", "score"]
    )
    op.create_index(op.f("ix_programs_job_id_score"), "programs", ["job_id", "score"])
    op.create_table(
        "proposals",
        sa.Column("job_id", ID, nullable=False),
        sa.Column("proposal_index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("parent_id", ID, nullable=True),
        sa.Column("island", sa.Integer(), nullable=False),
        sa.Column("proposer", NAME, nullable=False),
        sa.Column("status", STATE, nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("program_id", ID, nullable=True),
        sa.Column("tokens_in", sa.Integer(), nullable=False),
        sa.Column("tokens_out", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_proposals_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "proposal_index", name=op.f("pk_proposals")),
    )
    op.create_table(
        "best_cases",
        sa.Column("job_id", ID, nullable=False),
        sa.Column("case_key", sa.Text(), nullable=False),
        sa.Column("cost", sa.Float(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("program_id", ID, nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_best_cases_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["program_id"],
            ["programs.id"],
            name=op.f("fk_best_cases_program_id_programs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "case_key", name=op.f("pk_best_cases")),
    )
    op.create_table(
        "elites",
        sa.Column("job_id", ID, nullable=False),
        sa.Column("island", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("cell", CELL, nullable=False),
        sa.Column("program_id", ID, nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("improvements", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id", "island"],
            ["islands.job_id", "islands.island"],
            name=op.f("fk_elites_job_id_island_islands"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["program_id"],
            ["programs.id"],
            name=op.f("fk_elites_program_id_programs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "island", "cell", name=op.f("pk_elites")),
    )


def downgrade() -> None:
    op.drop_table("elites")
    op.drop_table("best_cases")
    op.drop_table("proposals")
    op.drop_index(op.f("ix_programs_job_id_score"), table_name="programs")
    op.drop_index(op.f("ix_programs_job_id_status_score"), table_name="programs")
    op.drop_table("programs")
    op.drop_table("islands")
    op.drop_table("jobs")
