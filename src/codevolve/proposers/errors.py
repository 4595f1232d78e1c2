"""Errors the proposers raise on purpose.

A proposer that cannot answer (nothing applies, the endpoint timed out) returns a
:class:`~codevolve.core.prompt.Proposal` with ``error`` set: that is an expected outcome. These
exceptions are for bad input, such as a weight outside [0, 1].
"""

from codevolve.core.errors import CodevolveError


class ProposerError(CodevolveError):
    """A proposer was configured or called with invalid input; the message names it."""
