"""Prompts sent to proposers and the proposals they return."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from codevolve.core.program import CaseResult, Metrics, ProgramId


@dataclass(frozen=True, slots=True)
class ProgramView:
    """What a proposer may see of a program: never held-out metrics."""

    id: ProgramId
    source: str
    score: float | None
    metrics: Metrics = field(default_factory=dict)
    cases: tuple[CaseResult, ...] = ()
    feedback: str = ""
    error: str | None = None
    stderr: str = ""  # what the program wrote to stderr in its evaluation (the prompt shows a tail)


@dataclass(frozen=True, slots=True)
class BestCase:
    """The best cost the job has seen for one case, and what achieved it."""

    key: str
    cost: float
    detail: str
    program_id: ProgramId


@dataclass(frozen=True, slots=True)
class Prompt:
    """Everything a proposer is given for one proposal.

    ``text`` is the rendered prompt an LLM reads; the structured fields carry the same information
    for the simulated proposer, which must not parse prose. The controller leaves ``text`` empty
    for a proposer that never reads it, unless prompts are stored.
    """

    job_id: str
    problem: str
    proposal_index: int
    island: int
    parent: ProgramView
    inspirations: tuple[ProgramView, ...]
    best_cases: Mapping[str, BestCase]
    context: str  # the problem's description for the proposer
    text: str  # the full rendered prompt, or "" when it was not rendered
    variant: str = "default"  # which template variant produced ``text``


class ProposalStatus(StrEnum):
    """What became of a proposal."""

    CHILD = "child"  # applied; a program was inserted
    DUPLICATE = "duplicate"  # applied, but the job already holds this exact program
    APPLY_FAILED = "apply_failed"  # the answer did not apply (see the reason)
    TOO_SIMILAR = "too_similar"  # applied, but a near-duplicate of a program shown (not evaluated)
    PROPOSER_FAILED = "proposer_failed"  # the proposer raised, timed out or returned nothing


@dataclass(frozen=True, slots=True)
class Proposal:
    """A proposer's answer to one prompt."""

    text: str  # SEARCH/REPLACE blocks or a full rewrite, possibly with prose around it
    proposer: str  # "simulated:<mutation kind>" or "llm:<model>"
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    error: str | None = None  # set when the proposer failed; ``text`` is then empty
