"""The end-of-run report: counts, budgets used, and the best program against the baselines.

The best program is the job's confirmed best: ``best_score`` is its figure on independent
samples, beside ``best_picked_score`` (the figure it was picked on), ``best_note`` and
``best_spread``; its train and test rows are its own evaluation's figures. The initial program
is the first would-be best, re-measured the same way: ``initial_score`` is its confirmed figure,
``initial_picked_score`` its own evaluation's, so that initial and best compare like with like."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.measurement import Verdict
from codevolve.core.problem import TRAIN_SCORE, Problem, legality_summary
from codevolve.core.program import Program
from codevolve.core.prompt import ProposalStatus
from codevolve.program_db import repository
from codevolve.services.read_models.usage import job_usage
from codevolve.services.read_models.views import job_best

HELDOUT_SCORE = "score"  # the held-out metric that mirrors a program's score on the held-out split


async def build_report(session: AsyncSession, job_id: str, problem: Problem) -> dict[str, Any]:
    """JSON-ready summary of a job; the table printed at the end of a run reads the same dict."""
    job = await repository.get_job(session, job_id)
    if job is None:
        raise LookupError(f"no job {job_id}")
    counts = await repository.program_counts(session, job_id)
    proposals = await repository.proposal_counts(session, job_id)
    # The job's best is the program with the best figure confirmed on independent samples.
    best = (
        None
        if job.best_program_id is None
        else await repository.get_program(session, job.best_program_id)
    )
    # The seed program has proposal index -1, so it comes first in proposal order.
    first = await repository.list_programs(session, job_id, limit=1, order="index")
    initial = first[0] if first and first[0].parent_id is None else None
    report: dict[str, Any] = {
        "job_id": job_id,
        "problem": job.config.problem,
        "label": job.config.label,
        "state": job.state.value,
        "seed": job.config.seed,
        "proposals": sum(proposals.values()),
        "evaluated": counts.evaluated,
        "failed": counts.failed,
        "rejected": counts.rejected,
        "pending": counts.pending,
        "apply_failed": proposals.get(ProposalStatus.APPLY_FAILED, 0),
        "proposer_failed": proposals.get(ProposalStatus.PROPOSER_FAILED, 0),
        "duplicates": proposals.get(ProposalStatus.DUPLICATE, 0),
        "wall_s": round(job.wall_s, 3),
        "initial_program_id": initial.id if initial else None,
        **initial_figures(initial),  # initial_score (confirmed), initial_picked_score...
        **await job_best(session, job),  # best_program_id, best_score (confirmed), best_spread...
        "max_cost_usd": job.config.proposer.max_cost_usd,
        **await job_usage(session, job_id),  # tokens_in, tokens_out, cost_usd, by_proposer, ...
        # proven for every input, or tested on how many (problems that check legality)
        "best_legality": legality_summary(best) if best else None,
    }
    evolved_train = best.metrics.get(TRAIN_SCORE, best.score) if best else None
    evolved_test = best.heldout.get(HELDOUT_SCORE) if best else None
    for split, evolved in (("train", evolved_train), ("test", evolved_test)):
        row: dict[str, float | None] = {}
        for baseline in problem.baselines():
            row[baseline.name] = baseline.train if split == "train" else baseline.test
        row["evolved"] = evolved
        oracle = row.get("oracle")
        row["evolved_over_oracle"] = evolved / oracle if evolved is not None and oracle else None
        report[split] = row
    return report


def initial_figures(initial: Program | None) -> dict[str, Any]:
    """The initial program's figures as the best's are given: ``initial_score`` confirmed on
    independent samples (None when it was not re-measured, or refuted: ``initial_verdict``
    says which), ``initial_picked_score`` from its own evaluation."""
    remeasure = None if initial is None else initial.remeasure
    confirmed = (
        remeasure.confirmed
        if remeasure is not None and remeasure.verdict is Verdict.CONFIRMED
        else None
    )
    return {
        "initial_score": confirmed,
        "initial_picked_score": None if initial is None else initial.score,
        "initial_verdict": None if remeasure is None else remeasure.verdict.value,
    }
