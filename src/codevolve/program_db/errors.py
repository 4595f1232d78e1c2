"""Errors of the program database.

Expected outcomes (a duplicate result, a stale island epoch, an elite that is not better) are
values returned by the repository; these exceptions mean bad input or a broken invariant.
"""

from __future__ import annotations

from codevolve.core.errors import CodevolveError


class ProgramDbError(CodevolveError):
    """Root of the program database's errors."""


class UnknownJobError(ProgramDbError):
    """A job id names no job in this database."""


class UnknownProgramError(ProgramDbError):
    """A program id names no program in this database."""
