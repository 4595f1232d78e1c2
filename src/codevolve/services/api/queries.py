"""Read models shared by the API routes and the dashboard: a job with its counts, the chart and
heatmap data, a program with its diff and lineage, a problem's results page. Each takes the
request's session."""

from __future__ import annotations

import difflib
import functools
from typing import Any

from fastapi import HTTPException, status
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.errors import CodevolveError
from codevolve.core.job import Job
from codevolve.core.plugin import ProblemPlugin
from codevolve.core.program import Program, ProgramStatus
from codevolve.program_db import repository
from codevolve.program_db.program_page import Page
from codevolve.program_db.repository import JobFigures
from codevolve.services.api.schemas import (
    Ancestor,
    BestConfirmed,
    JobDetail,
    JobPublic,
    ProgramDetail,
    ProgramPage,
    Programs,
    ProgramSummary,
    ResultsAnswer,
    Usage,
    finite,
)
from codevolve.services.read_models.results import results_table
from codevolve.services.read_models.usage import COST_DIGITS, program_proposal
from codevolve.services.read_models.views import best_view
from codevolve.services.runtime.problems import cached_problem

HISTORY_POINTS = 5000  # points sent to the chart; a long run is thinned to about this many
TOP_PROGRAMS = 10


def not_found(what: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no {what}")


async def visible_job(session: AsyncSession, job_id: str, *, owner: str | None) -> Job:
    """The job, if ``owner`` (None: anyone) may see it; 404 otherwise, so ids do not leak."""
    job = await repository.get_job(session, job_id)
    if job is None or (owner is not None and job.owner != owner):
        raise not_found(f"job {job_id}")
    return job


async def visible_program_page(
    session: AsyncSession, page: Page, *, owner: str | None
) -> ProgramPage:
    """The page of the job's programs, if ``owner`` (None: anyone) may see the job (else the 404
    of :func:`visible_job`), read with the job's owner in one statement."""
    found = await repository.owner_and_page(session, page)
    if found is None or (owner is not None and found[0] != owner):
        raise not_found(f"job {page.job_id}")
    return ProgramPage.model_construct(
        programs=[ProgramSummary.trusted(p) for p in found[1]], limit=page.limit, offset=page.offset
    )


async def visible_job_detail(session: AsyncSession, job_id: str, *, owner: str | None) -> JobDetail:
    """:func:`job_detail` of the job, if ``owner`` (None: anyone) may see it (else the 404 of
    :func:`visible_job`), read with its figures in one statement."""
    found = await repository.job_with_figures(session, job_id)
    if found is None or (owner is not None and found[0].owner != owner):
        raise not_found(f"job {job_id}")
    return job_detail(*found)


async def job_figures_detail(session: AsyncSession, job: Job) -> JobDetail:
    """:func:`job_detail` of a job already read."""
    return job_detail(job, await repository.job_figures(session, job.id, job.best_program_id))


def job_detail(job: Job, figures: JobFigures) -> JobDetail:
    """The job with its figures (program_db/job_figures.py)."""
    best = best_view(job, figures)
    return JobDetail(
        **JobPublic.of(job).model_dump(),
        programs=Programs.of(figures.programs),
        best=None
        if best["best_program_id"] is None or best["best_verdict"] is None
        else BestConfirmed(
            program_id=best["best_program_id"],
            confirmed_score=finite(best["best_score"]),
            picked_score=finite(best["best_picked_score"]),
            note=best["best_note"],
            spread=best["best_spread"],
            spread_over=best["best_spread_over"],
        ),
        remeasured=best["remeasured"],
        usage=Usage(
            tokens_in=figures.usage.tokens_in,
            tokens_out=figures.usage.tokens_out,
            cost_usd=round(figures.usage.cost_usd, COST_DIGITS),
            max_cost_usd=job.config.proposer.max_cost_usd,
        ),
    )


async def top_programs(session: AsyncSession, job_id: str, limit: int) -> list[ProgramSummary]:
    programs = await repository.list_programs(
        session, job_id, status=ProgramStatus.EVALUATED, limit=limit, order="score"
    )
    return [ProgramSummary.of(p) for p in programs]


async def job_live(session: AsyncSession, job: Job) -> dict[str, Any]:
    """Everything the job page draws: the job, the score history (best so far overall and per
    island), the elites of every island as heatmap cells, and the top programs."""
    detail = await job_figures_detail(session, job)
    history = await repository.island_score_history(session, job.id)
    step = max(1, len(history) // HISTORY_POINTS)
    islands: list[dict[str, Any]] = []
    for island in sorted(await repository.island_epochs(session, job.id)):
        elites = await repository.island_elites(session, job.id, island)
        islands.append(
            {
                "island": island,
                "cells": [
                    {"cell": list(e.cell), "score": finite(e.score), "program_id": e.program_id}
                    for e in elites
                ],
            }
        )
    return {
        "job": detail.model_dump(mode="json"),
        "history": [[index, island, score] for index, island, score in _thin(history, step)],
        "islands": islands,
        "features": _feature_axes(job.config.problem),
        "top": [
            p.model_dump(mode="json") for p in await top_programs(session, job.id, TOP_PROGRAMS)
        ],
    }


def _thin(history: list[tuple[int, int, float]], step: int) -> list[tuple[int, int, float]]:
    """Every ``step``-th point, plus every point that set a new best (so the best-so-far line
    stays exact)."""
    if step == 1:
        return history
    kept, best = [], float("-inf")
    for position, point in enumerate(history):
        if point[2] > best or position % step == 0:
            kept.append(point)
        best = max(best, point[2])
    return kept


@functools.lru_cache(maxsize=64)
def _axes(problem: str) -> tuple[tuple[str, int], ...]:
    """Names and bin counts of the problem's feature descriptors (the heatmap's axes), built once
    per process (a poll every 2 s must not rebuild a problem); empty for a problem this process
    cannot build (an uploaded bundle it has not loaded), whose grid is sized from the cells."""
    try:
        features = cached_problem(problem).features
    except (CodevolveError, ImportError):
        return ()
    return tuple((feature.name, feature.bins) for feature in features)


def _feature_axes(problem: str) -> list[dict[str, Any]]:
    return [{"name": name, "bins": bins} for name, bins in _axes(problem)]


async def program_detail(session: AsyncSession, program: Program) -> ProgramDetail:
    parent = (
        None
        if program.parent_id is None
        else await repository.get_program(session, program.parent_id)
    )
    diff = "" if parent is None else unified_diff(parent, program)
    chain = await repository.lineage(session, program.id)
    lineage = [
        Ancestor(id=i, generation=g, status=s, score=finite(score)) for i, g, s, score in chain
    ]
    proposal = await program_proposal(session, program)
    return ProgramDetail.build(program, diff=diff, lineage=lineage, proposal=proposal)


def unified_diff(parent: Program, child: Program) -> str:
    return "".join(
        difflib.unified_diff(
            parent.source.splitlines(keepends=True),
            child.source.splitlines(keepends=True),
            fromfile=f"parent {parent.id[:8]}",
            tofile=f"program {child.id[:8]}",
        )
    )


async def visible_program(session: AsyncSession, program_id: str, *, owner: str | None) -> Program:
    """The program, if ``owner`` (None: anyone) may see its job; else the same 404 as for an id
    that does not exist, which names neither the job nor whether the program exists."""
    program = await repository.get_program(session, program_id)
    if program is None or (owner is not None and not await _owns(session, program, owner)):
        raise not_found(f"program {program_id}")
    return program


async def _owns(session: AsyncSession, program: Program, owner: str) -> bool:
    job = await repository.get_job(session, program.job_id)
    return job is not None and job.owner == owner


async def results_answer(
    session: AsyncSession, plugin: ProblemPlugin, *, owner: str | None
) -> ResultsAnswer:
    """``plugin``'s results page over the jobs ``owner`` (None: anyone) may see, newest first
    (read_models/results.py): a case run more than once is one row, its newest job's (per owner),
    so the figures count cases; a job whose stored records the plug-in cannot read (an upload
    can carry anything) is left out rather than failing the whole page."""
    assert plugin.results is not None
    table = await results_table(session, plugin, owner=owner)
    return ResultsAnswer.of(table, plugin.results)
