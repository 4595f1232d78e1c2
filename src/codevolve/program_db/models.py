"""The tables, as SQLAlchemy 2 typed declarative models.

These rows never leave ``program_db``: the repository turns them into ``core`` values. The same
models run on SQLite and Postgres, so types stay portable (JSON, not JSONB; strings, not enum
types) and every constraint is named by the convention below, which lets Alembic migrations address
constraints by name on both.

Changing a model means writing a migration: the migration test fails while the two disagree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID_LENGTH = 32  # uuid4 hex
NAME_LENGTH = 200  # owners, problems, proposers
STATE_LENGTH = 16  # job states, program and proposal statuses
HASH_LENGTH = 64  # sha256 hex
CELL_LENGTH = 64  # "3,5": comma-separated bin indices
LAUNCH_LENGTH = 500  # a launch's parameters as text


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012  (SQLAlchemy reads this class attribute)
        dict[str, Any]: JSON,
        list[Any]: JSON,
        datetime: DateTime(timezone=True),
        float: Float,
        str: Text,
    }


class JobRow(Base):
    """One evolution run. ``config`` is the frozen RunConfig as JSON."""

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    owner: Mapped[str] = mapped_column(String(NAME_LENGTH), default="")
    problem: Mapped[str] = mapped_column(String(NAME_LENGTH))
    config: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(STATE_LENGTH))
    error: Mapped[str | None]
    proposals: Mapped[int] = mapped_column(default=0)  # proposals recorded (what budgets read)
    wall_s: Mapped[float] = mapped_column(default=0.0)  # seconds running, summed over resumes
    # No foreign key: jobs and programs would reference each other. The controller sets it to
    # the program with the best confirmed figure (programs.confirmed_score) as re-measures land;
    # update_job_best() refreshes it from best_program() (the best score as picked).
    best_program_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    best_score: Mapped[float | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class ProgramRow(Base):
    """One candidate. Only a ``pending`` row changes, once, by a guarded update."""

    __tablename__ = "programs"
    __table_args__ = (
        UniqueConstraint("job_id", "content_hash"),  # dedupe within a job
        # Pending programs, counts per status, and the best evaluated program (one index step).
        Index(None, "job_id", "status", "score"),
        Index(None, "job_id", "score"),  # listing by score
    )

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    source: Mapped[str]
    content_hash: Mapped[str] = mapped_column(String(HASH_LENGTH))
    parent_id: Mapped[str | None] = mapped_column(ForeignKey("programs.id", ondelete="SET NULL"))
    island: Mapped[int]
    epoch: Mapped[int] = mapped_column(default=0)  # the island's epoch when the parent was drawn
    generation: Mapped[int]
    proposal_index: Mapped[int]
    status: Mapped[str] = mapped_column(String(STATE_LENGTH))
    attempts: Mapped[int] = mapped_column(default=0)  # tasks enqueued for it
    diff: Mapped[str] = mapped_column(default="")
    proposer: Mapped[str] = mapped_column(String(NAME_LENGTH), default="")
    score: Mapped[float | None]
    stage_scores: Mapped[dict[str, Any]] = mapped_column(default=dict)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    heldout: Mapped[dict[str, Any]] = mapped_column(default=dict)
    features: Mapped[dict[str, Any]] = mapped_column(default=dict)
    cell: Mapped[str | None] = mapped_column(String(CELL_LENGTH))
    cases: Mapped[list[Any]] = mapped_column(default=list)  # [[key, cost, detail], ...]
    feedback: Mapped[str] = mapped_column(default="")
    error: Mapped[str | None]
    artifacts: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    evaluated_at: Mapped[datetime | None]
    # Set once, when a would-be best of the job was re-measured on independent samples (NULL:
    # never was): the verdict, the confirmed figure the job's best is chosen by, and the rest of
    # the re-measure (samples, note, spread). A re-measure never changes the columns above.
    verdict: Mapped[str | None] = mapped_column(String(STATE_LENGTH))
    confirmed_score: Mapped[float | None]
    remeasure: Mapped[dict[str, Any] | None]


class ProposalRow(Base):
    """One prompt answered (or not) by a proposer; the index is the job's proposal counter."""

    __tablename__ = "proposals"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    proposal_index: Mapped[int] = mapped_column(primary_key=True)
    parent_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    island: Mapped[int]
    proposer: Mapped[str] = mapped_column(String(NAME_LENGTH))
    status: Mapped[str] = mapped_column(String(STATE_LENGTH))
    reason: Mapped[str] = mapped_column(default="")
    program_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    tokens_in: Mapped[int] = mapped_column(default=0)
    tokens_out: Mapped[int] = mapped_column(default=0)
    cost_usd: Mapped[float] = mapped_column(default=0.0)  # US dollars
    # What the proposer was asked and answered (kept for inspection; empty for the simulated one
    # unless asked), and which prompt template variant made the prompt (meta-prompting statistics).
    prompt: Mapped[str] = mapped_column(default="")
    answer: Mapped[str] = mapped_column(default="")
    prompt_variant: Mapped[str] = mapped_column(String(NAME_LENGTH), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class IslandRow(Base):
    """An island's epoch: bumped by a reset, which makes children of older parents stale."""

    __tablename__ = "islands"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    island: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    epoch: Mapped[int] = mapped_column(default=0)


class EliteRow(Base):
    """The elite of one cell of one island. At most one per (job, island, cell): the key."""

    __tablename__ = "elites"
    __table_args__ = (
        ForeignKeyConstraint(
            ["job_id", "island"], ["islands.job_id", "islands.island"], ondelete="CASCADE"
        ),
    )

    job_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    island: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    cell: Mapped[str] = mapped_column(String(CELL_LENGTH), primary_key=True)
    program_id: Mapped[str] = mapped_column(ForeignKey("programs.id", ondelete="CASCADE"))
    score: Mapped[float]
    epoch: Mapped[int]  # the island's epoch the elite was written at
    improvements: Mapped[int] = mapped_column(default=0)  # times the cell's elite was replaced


class BestCaseRow(Base):
    """The lowest cost a job has seen for one test case, and the program that achieved it."""

    __tablename__ = "best_cases"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    case_key: Mapped[str] = mapped_column(primary_key=True)
    cost: Mapped[float]  # lower is better, in the problem's unit (e.g. microseconds)
    detail: Mapped[str] = mapped_column(default="")
    program_id: Mapped[str] = mapped_column(ForeignKey("programs.id", ondelete="CASCADE"))


class ApiTokenRow(Base):
    """A bearer token of the REST API. Only the sha256 of the token is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    owner: Mapped[str] = mapped_column(String(NAME_LENGTH))
    token_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), unique=True)
    can_upload: Mapped[bool] = mapped_column(Boolean, default=False)  # may upload evaluators
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]


class BundleRow(Base):
    """An uploaded problem bundle (the OpenEvolve folder layout), keyed by its content hash."""

    __tablename__ = "bundles"

    id: Mapped[str] = mapped_column(String(HASH_LENGTH), primary_key=True)  # sha256 of the files
    owner: Mapped[str] = mapped_column(String(NAME_LENGTH))
    files: Mapped[dict[str, Any]]  # relative path -> base64 of the file's bytes
    size_bytes: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class LaunchTimingRow(Base):
    """The launch store: the judge's timing of one launch on one case, per GPU model and harness
    version (core/launch_store.py). Shared by every job; the latest timing of a key wins."""

    __tablename__ = "launch_timings"

    kernel_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), primary_key=True)
    launch: Mapped[str] = mapped_column(String(LAUNCH_LENGTH), primary_key=True)
    case_key: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    gpu: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    harness: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    t_us: Mapped[float]  # median microseconds per call
    cublas_us: Mapped[float]  # median microseconds of cuBLAS in the same judging
    samples: Mapped[int]  # timed batches; 0: checked right, never timed
    job_id: Mapped[str] = mapped_column(String(ID_LENGTH))  # who measured it (no foreign key:
    program_id: Mapped[str] = mapped_column(String(ID_LENGTH))  # timings outlive their job)
    measured_at: Mapped[datetime] = mapped_column(default=utcnow)
