"""The program database's API: async functions over the caller's session.

Contract, for every function here:

- it takes an ``AsyncSession`` and never commits: the caller owns the transaction (one session and
  one transaction per controller step or API request; the controller's come from
  :class:`~codevolve.program_db.job_store.JobStore`). One exception: ``write_proposals`` also
  takes a Postgres connection in autocommit, as it is one statement there;
- it returns ``core`` values (``Job``, ``Program``, ``BestCase``...) or plain data, never rows;
- expected outcomes are values (``apply_evaluation`` returns False for a duplicate delivery,
  ``add_elite`` returns ``AddOutcome.STALE`` after a reset); exceptions derive from
  :class:`~codevolve.program_db.errors.ProgramDbError`, except the database driver's own.

The functions live in ``jobs`` (jobs, proposal log), ``proposal_batches`` (the controller's
batched proposal write), ``programs`` (programs and their guarded transition), ``elites`` (islands,
cells, sampling, migration, resets, best cases), ``tokens`` (API tokens, stored hashed),
``bundles`` (uploaded problem bundles), ``stats`` (dashboard and metrics aggregates) and
``job_figures`` (a job's counts, usage and best, in one statement) and ``launch_timings`` (the
launch store, shared by every job).
"""

from __future__ import annotations

from codevolve.program_db.archive import AddOutcome, EliteRef
from codevolve.program_db.bundles import Bundle, bundle_problem, get_bundle, store_bundle
from codevolve.program_db.elites import (
    Sample,
    add_elite,
    best_cases,
    island_elites,
    island_epochs,
    job_elites,
    migrate,
    record_best_cases,
    reset_islands,
    sample,
    upsert_best_cases,
)
from codevolve.program_db.job_figures import JobFigures, job_figures, job_with_figures
from codevolve.program_db.jobs import (
    ProposalEntry,
    add_job_wall,
    create_job,
    get_job,
    list_jobs,
    proposal_counts,
    proposal_stats,
    record_proposal,
    record_proposals,
    set_job_best,
    set_job_state,
    update_job_best,
)
from codevolve.program_db.launch_timings import record_timings, stored_timings
from codevolve.program_db.mirror import ArchiveMirror, Drawn
from codevolve.program_db.program_page import ProgramOrder, list_programs, owner_and_page
from codevolve.program_db.programs import (
    apply_evaluation,
    apply_evaluations,
    best_program,
    confirmed_best,
    evaluated_program,
    find_program_by_hash,
    get_program,
    get_programs,
    insert_program,
    insert_programs,
    mark_enqueued,
    mark_failed,
    pending_programs,
    program_counts,
    record_remeasure,
    remeasure_candidates,
    score_history,
)
from codevolve.program_db.proposal_batches import write_proposals
from codevolve.program_db.stats import (
    island_score_history,
    jobs_by_state,
    lineage,
    programs_by_status,
)
from codevolve.program_db.tokens import (
    ApiToken,
    create_token,
    find_token,
    list_tokens,
    revoke_token,
)
from codevolve.program_db.usage import (
    ProposalRecord,
    UsageRow,
    job_cost,
    proposal_of_program,
    proposal_usage,
)

__all__ = [
    "AddOutcome",
    "ApiToken",
    "ArchiveMirror",
    "Bundle",
    "Drawn",
    "EliteRef",
    "JobFigures",
    "ProgramOrder",
    "ProposalEntry",
    "ProposalRecord",
    "Sample",
    "UsageRow",
    "add_elite",
    "add_job_wall",
    "apply_evaluation",
    "apply_evaluations",
    "best_cases",
    "best_program",
    "bundle_problem",
    "confirmed_best",
    "create_job",
    "create_token",
    "evaluated_program",
    "find_program_by_hash",
    "find_token",
    "get_bundle",
    "get_job",
    "get_program",
    "get_programs",
    "insert_program",
    "insert_programs",
    "island_elites",
    "island_epochs",
    "island_score_history",
    "job_cost",
    "job_elites",
    "job_figures",
    "job_with_figures",
    "jobs_by_state",
    "lineage",
    "list_jobs",
    "list_programs",
    "list_tokens",
    "mark_enqueued",
    "mark_failed",
    "migrate",
    "owner_and_page",
    "pending_programs",
    "program_counts",
    "programs_by_status",
    "proposal_counts",
    "proposal_of_program",
    "proposal_stats",
    "proposal_usage",
    "record_best_cases",
    "record_proposal",
    "record_proposals",
    "record_remeasure",
    "record_timings",
    "remeasure_candidates",
    "reset_islands",
    "revoke_token",
    "sample",
    "score_history",
    "set_job_best",
    "set_job_state",
    "store_bundle",
    "stored_timings",
    "update_job_best",
    "upsert_best_cases",
    "write_proposals",
]
