"""The program database's API: async functions over the caller's session.

Contract, for every function here:

- it takes an ``AsyncSession`` and never commits: the caller owns the transaction (one session and
  one transaction per controller step or API request);
- it returns ``core`` values (``Job``, ``Program``, ``BestCase``...) or plain data, never rows;
- expected outcomes are values (``apply_evaluation`` returns False for a duplicate delivery,
  ``add_elite`` returns ``AddOutcome.STALE`` after a reset); exceptions derive from
  :class:`~codevolve.program_db.errors.ProgramDbError`, except the database driver's own.

The functions live in ``jobs`` (jobs, proposal log), ``programs`` (programs and their guarded
transition) and ``elites`` (islands, cells, sampling, migration, resets, best cases).
"""

from __future__ import annotations

from codevolve.program_db.archive import AddOutcome, EliteRef
from codevolve.program_db.elites import (
    Sample,
    add_elite,
    best_cases,
    island_elites,
    island_epochs,
    migrate,
    reset_islands,
    sample,
    upsert_best_cases,
)
from codevolve.program_db.jobs import (
    add_job_wall,
    create_job,
    get_job,
    list_jobs,
    proposal_counts,
    proposal_stats,
    record_proposal,
    set_job_state,
    update_job_best,
)
from codevolve.program_db.programs import (
    ProgramOrder,
    apply_evaluation,
    best_program,
    find_program_by_hash,
    get_program,
    get_programs,
    insert_program,
    list_programs,
    mark_enqueued,
    mark_failed,
    pending_programs,
    program_counts,
    score_history,
)

__all__ = [
    "AddOutcome",
    "EliteRef",
    "ProgramOrder",
    "Sample",
    "add_elite",
    "add_job_wall",
    "apply_evaluation",
    "best_cases",
    "best_program",
    "create_job",
    "find_program_by_hash",
    "get_job",
    "get_program",
    "get_programs",
    "insert_program",
    "island_elites",
    "island_epochs",
    "list_jobs",
    "list_programs",
    "mark_enqueued",
    "mark_failed",
    "migrate",
    "pending_programs",
    "program_counts",
    "proposal_counts",
    "proposal_stats",
    "record_proposal",
    "reset_islands",
    "sample",
    "score_history",
    "set_job_state",
    "update_job_best",
    "upsert_best_cases",
]
