"""Errors of the evaluator workers.

A candidate that crashes, hangs or returns garbage is not an error here: the sandbox reports it as a
:class:`~codevolve.core.problem.SandboxReply` value. These exceptions are for a worker that cannot
do its job at all.
"""

from codevolve.core.errors import CodevolveError


class WorkerError(CodevolveError):
    """Base class of the errors raised by :mod:`codevolve.evaluator_workers`."""


class SandboxUnavailable(WorkerError):
    """The sandbox servers cannot be started, or the pool is closed; no candidate can run."""
