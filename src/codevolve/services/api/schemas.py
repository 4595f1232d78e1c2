"""HTTP schemas: what the API accepts and answers, kept apart from the ``core`` values.

Create schemas forbid unknown fields, so a typo is a 422 naming the field rather than a setting
silently ignored, and are strict: ``"100"``, ``true`` or ``1.0`` is not an integer, a float must
be finite, and ``null`` is not a value (leave a key out for its default). Job config keys use the
command line's names (``proposals``, ``in_flight``). The problem is one of the registry's names
(listed in the schema as an enum) or ``bundle:<sha256>``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, field_validator
from pydantic_core import PydanticCustomError

from codevolve.core.job import Job, ProgramCounts
from codevolve.core.program import Program, ProgramHeader
from codevolve.core.results import ResultsPage
from codevolve.problems.registry import problem_names
from codevolve.program_db.bundles import BUNDLE_PROBLEM_PREFIX
from codevolve.services.read_models.results import ResultsTable
from codevolve.services.run_config import CAPS, FIELD_OF

Id = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$", description="uuid4 hex")]
Owner = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.@-]{1,200}$", description="owner name")]
BUNDLE_NAME = re.compile(r"^bundle:[0-9a-f]{64}$")
MAX_NAME_SHOWN = 40  # characters of an unknown problem name repeated in its error


def _known_problem(name: str) -> str:
    if name in problem_names() or BUNDLE_NAME.match(name):
        return name
    shown = name if len(name) <= MAX_NAME_SHOWN else name[: MAX_NAME_SHOWN - 1] + "…"
    kind, what = (
        ("unknown_bundle", "a bundle is named bundle:<64 hex digits of its sha256>")
        if name.startswith(BUNDLE_PROBLEM_PREFIX)
        else ("unknown_problem", "known problems: " + ", ".join(problem_names()))
    )
    message = "unknown problem {name}; {what}"
    raise PydanticCustomError(kind, message, {"name": repr(shown), "what": what})


ProblemName = Annotated[
    str,
    AfterValidator(_known_problem),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "enum": problem_names()},
                {"type": "string", "pattern": BUNDLE_NAME.pattern},
            ],
            "description": "a built-in problem, or bundle:<sha256> of an uploaded bundle",
        }
    ),
]
# A config key: absent for the run config's default, never null (the schema says so too).
Int = int | None
Float = Annotated[float, Field(allow_inf_nan=False)] | None


def _not_nullable(schema: dict[str, Any]) -> None:
    """The key's schema without the null that only stands for "absent"."""
    schema.pop("default", None)
    options = [o for o in schema.pop("anyOf", []) if o.get("type") != "null"]
    for option in options:
        schema.update(option)


def _key(key: str, description: str, *, ge: float | None = None, gt: float | None = None) -> Any:
    """The field of config key ``key``: optional, documented, bounded below as the RunConfig is
    and above by the cap every source shares (``run_config.CAPS``, by the field the key sets), so
    that a bundle's config.yaml and the command line are held to the same numbers."""
    cap = CAPS[FIELD_OF[key]]
    return Field(
        None, ge=ge, gt=gt, le=cap, description=description, json_schema_extra=_not_nullable
    )


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class JobConfigIn(_Input):
    """Overrides of the run config; each key is named like the ``codevolve run`` flag. A key left
    out takes the run config's default."""

    proposals: Int = _key("proposals", "proposal budget", ge=1)
    seed: Int = _key("seed", "seed of every random choice", ge=0)
    islands: Int = _key("islands", "independent sub-populations", ge=1)
    in_flight: Int = _key("in_flight", "proposals in flight at once", ge=1)
    max_wall_s: Float = _key("max_wall_s", "wall budget, seconds", gt=0)
    remeasure_samples: Int = _key(
        "remeasure_samples", "fresh samples that confirm a would-be best", ge=1
    )
    exploit_ratio: Float = _key("exploit_ratio", "rank sampling probability", ge=0)
    migration_interval: Int = _key(
        "migration_interval", "proposals between migrations (0: never)", ge=0
    )
    migrants: Int = _key("migrants", "elites sent per migration", ge=0)
    reset_interval: Int = _key("reset_interval", "proposals between island resets (0: never)", ge=0)

    @field_validator("*", mode="before")
    @classmethod
    def _no_null(cls, value: object) -> object:
        if value is None:  # "null" for "the default" hides a client's bug; leave the key out
            raise PydanticCustomError("null", "null is not a value: leave the key out instead")
        return value

    def given_keys(self) -> dict[str, Any]:
        """The keys that were given, and their values (``run_config.NAMES`` maps them to
        RunConfig fields)."""
        return self.model_dump(exclude_none=True)


class JobCreate(_Input):
    problem: ProblemName
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
    wall_s: float = Field(
        description="seconds running, summed over resumes; a running job's is stored every 2 s"
    )
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


class SpreadPublic(BaseModel):
    geomean: float
    gsd: float = Field(description="geometric standard deviation (1: all equal)")
    low: float
    median: float
    high: float
    count: int
    text: str = Field(description="the same, as one line")


class BestConfirmed(BaseModel):
    """The job's best as re-measured on independent samples before it is reported."""

    program_id: str
    confirmed_score: float | None = Field(description="on independent samples: best_score")
    picked_score: float | None = Field(description="the score it was picked on")
    note: str | None = Field(description="why the figure deserves a look (winner's curse)")
    spread: SpreadPublic | None = Field(description="how the confirmed figure is distributed")
    spread_over: str | None = Field(
        description="'cases': per-case speedups over the initial program; 'samples': the samples"
    )


class JobDetail(JobPublic):
    programs: Programs
    usage: Usage
    best: BestConfirmed | None = None
    remeasured: dict[str, int] = Field(
        default_factory=dict, description="would-be bests re-measured, per verdict"
    )


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

    @classmethod
    def trusted(cls, program: Program | ProgramHeader) -> ProgramSummary:
        """:meth:`of` without validation: the fields already have the schema's types (a
        program's columns), so a page of them skips re-checking each one."""
        return cls.model_construct(**_summary_fields(program))


def _summary_fields(program: Program | ProgramHeader) -> dict[str, Any]:
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


class ResultsAnswer(BaseModel):
    """A problem's results page (core/results.py): one row per case, its newest job's, newest
    first, and the page's figures over them; the fields are the problem plug-in's."""

    rows: list[dict[str, Any]] = Field(description="one per case; a number JSON can't hold: null")
    summary: dict[str, Any]

    @classmethod
    def of(cls, table: ResultsTable, page: ResultsPage) -> ResultsAnswer:
        rows = [
            {k: finite(v) if isinstance(v, float) else v for k, v in page.public(row).items()}
            for row in table.rows
        ]
        return cls(rows=rows, summary=dict(table.summary))


class ErrorDetail(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    detail: list[ErrorDetail] | str
