"""HTTP schemas: what the API accepts and answers, kept apart from the ``core`` values.

Create schemas forbid unknown fields, so a typo is a 422 naming the field rather than a setting
silently ignored. Job config keys use the command line's names (``proposals``, ``in_flight``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from codevolve.core.job import Job, ProgramCounts
from codevolve.core.program import Program

Id = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$", description="uuid4 hex")]
Owner = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.@-]{1,200}$", description="owner name")]
MAX_PROPOSALS = 10_000_000  # a budget beyond this is a typo, not a plan


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobConfigIn(_Input):
    """Overrides of the run config; each key is named like the ``codevolve run`` flag."""

    proposals: int | None = Field(None, ge=1, le=MAX_PROPOSALS, description="proposal budget")
    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="seed of every random choice")
    islands: int | None = Field(None, ge=1, le=256, description="independent sub-populations")
    in_flight: int | None = Field(None, ge=1, le=4096, description="proposals in flight at once")
    max_wall_s: float | None = Field(None, gt=0, le=30 * 86400, description="wall budget, seconds")
    exploit_ratio: float | None = Field(None, ge=0, le=1, description="rank sampling probability")
    migration_interval: int | None = Field(
        None, ge=0, le=MAX_PROPOSALS, description="proposals between migrations (0: never)"
    )
    migrants: int | None = Field(None, ge=0, le=64, description="elites sent per migration")
    reset_interval: int | None = Field(
        None, ge=0, le=MAX_PROPOSALS, description="proposals between island resets (0: never)"
    )

    def run_config_fields(self) -> dict[str, Any]:
        """The RunConfig field names and values of the keys that were given."""
        renamed = {"proposals": "max_proposals", "in_flight": "max_in_flight"}
        return {
            renamed.get(key, key): value
            for key, value in self.model_dump(exclude_none=True).items()
        }


class JobCreate(_Input):
    problem: str = Field(
        min_length=1, max_length=200, description="a built-in problem, or bundle:<sha256>"
    )
    config: JobConfigIn = JobConfigIn()


class BundleJobCreate(_Input):
    """A problem bundle in the OpenEvolve layout, and the job to run on it."""

    files: dict[str, str] = Field(
        description="relative path -> base64 of the file: initial_program.py, evaluator.py, "
        "config.yaml and any helpers"
    )
    config: JobConfigIn = JobConfigIn()


class Programs(BaseModel):
    pending: int
    evaluated: int
    failed: int
    rejected: int

    @classmethod
    def of(cls, counts: ProgramCounts) -> Programs:
        return cls(
            pending=counts.pending,
            evaluated=counts.evaluated,
            failed=counts.failed,
            rejected=counts.rejected,
        )


class JobPublic(BaseModel):
    id: str
    problem: str
    state: str
    owner: str
    created_at: datetime
    proposals: int = Field(description="proposals made so far")
    max_proposals: int
    wall_s: float = Field(description="seconds running, summed over resumes")
    max_wall_s: float | None
    best_score: float | None
    best_program_id: str | None
    error: str | None
    config: dict[str, Any]

    @classmethod
    def of(cls, job: Job) -> JobPublic:
        return cls(
            id=job.id,
            problem=job.config.problem,
            state=job.state.value,
            owner=job.owner,
            created_at=job.created_at,
            proposals=job.proposals,
            max_proposals=job.config.max_proposals,
            wall_s=job.wall_s,
            max_wall_s=job.config.max_wall_s,
            best_score=finite(job.best_score),
            best_program_id=job.best_program_id,
            error=job.error,
            config=job.config.model_dump(mode="json"),
        )


class BundleJobPublic(JobPublic):
    warnings: list[str] = Field(description="config.yaml keys that did not carry over")


class Usage(BaseModel):
    tokens_in: int = Field(description="prompt tokens sent to proposers")
    tokens_out: int = Field(description="tokens they answered")
    cost_usd: float = Field(description="US dollars, as the proposers priced them")
    max_cost_usd: float | None = Field(description="the job's cost budget, if any")


class JobDetail(JobPublic):
    programs: Programs
    usage: Usage


class JobList(BaseModel):
    jobs: list[JobPublic]


class ProgramSummary(BaseModel):
    id: str
    job_id: str
    status: str
    score: float | None
    island: int
    generation: int
    proposal_index: int
    parent_id: str | None
    proposer: str
    cell: list[int] | None
    created_at: datetime | None

    @classmethod
    def of(cls, program: Program) -> ProgramSummary:
        return cls(**_summary_fields(program))


def _summary_fields(program: Program) -> dict[str, Any]:
    return {
        "id": program.id,
        "job_id": program.job_id,
        "status": program.status.value,
        "score": finite(program.score),
        "island": program.island,
        "generation": program.generation,
        "proposal_index": program.proposal_index,
        "parent_id": program.parent_id,
        "proposer": program.proposer,
        "cell": None if program.cell is None else list(program.cell),
        "created_at": program.created_at,
    }


class ProgramPage(BaseModel):
    programs: list[ProgramSummary]
    limit: int
    offset: int


class Ancestor(BaseModel):
    id: str
    generation: int
    status: str
    score: float | None


class ProgramDetail(ProgramSummary):
    source: str
    diff: str = Field(description="the SEARCH/REPLACE text that made it from its parent")
    diff_to_parent: str = Field(description="unified diff of the parent's source to this source")
    stage_scores: dict[str, float]
    metrics: dict[str, float]
    heldout: dict[str, float] = Field(description="reported, never used for selection")
    features: dict[str, float]
    feedback: str
    error: str | None
    artifacts: dict[str, str]
    evaluated_at: datetime | None
    lineage: list[Ancestor] = Field(description="this program, its parent, ... up to the root")
    proposal: dict[str, Any] | None = Field(
        description="the proposal that made it: proposer, tokens, cost, prompt and answer when "
        "the job logs them; null for the initial program"
    )

    @classmethod
    def build(
        cls,
        program: Program,
        *,
        diff: str,
        lineage: list[Ancestor],
        proposal: dict[str, Any] | None,
    ) -> ProgramDetail:
        return cls(
            **_summary_fields(program),
            source=program.source,
            diff=program.diff,
            diff_to_parent=diff,
            stage_scores=_finite(program.stage_scores),
            metrics=_finite(program.metrics),
            heldout=_finite(program.heldout),
            features=_finite(program.features),
            feedback=program.feedback,
            error=program.error,
            artifacts=dict(program.artifacts),
            evaluated_at=program.evaluated_at,
            lineage=lineage,
            proposal=proposal,
        )


def finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity: such a number is answered as null."""
    return value if value is not None and math.isfinite(value) else None


def _finite(values: Mapping[str, float]) -> dict[str, float]:
    """Metrics that are not finite numbers are left out of an answer (JSON cannot carry them)."""
    return {key: float(value) for key, value in values.items() if math.isfinite(value)}


class WorkerPublic(BaseModel):
    name: str
    capabilities: list[str]
    last_seen: datetime | None
    busy: int = Field(0, description="tasks being evaluated")
    concurrency: int = Field(0, description="evaluations at once")
    host: str = ""
    gpu_model: str | None = None


class Fleet(BaseModel):
    mode: Literal["embedded", "distributed"]
    workers: list[WorkerPublic]


class TokenCreate(_Input):
    owner: Owner
    can_upload: bool = Field(False, description="may upload bundles whose evaluators run code")


class TokenPublic(BaseModel):
    id: str
    owner: str
    can_upload: bool
    created_at: datetime
    revoked_at: datetime | None


class TokenCreated(TokenPublic):
    token: str = Field(description="the bearer token; shown once, stored hashed")


class TokenList(BaseModel):
    tokens: list[TokenPublic]


class Health(BaseModel):
    status: Literal["ok"]
    database: Literal["ok"]
    version: str
    problems: list[str]


class ErrorDetail(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    detail: list[ErrorDetail] | str
