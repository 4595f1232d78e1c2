"""Errors the prompt sampler raises on purpose.

An answer that does not apply is an expected outcome and comes back as an
:class:`~codevolve.core.diff.ApplyFailure` value. :class:`PromptSamplerError` is for invalid input
to the sampler itself, such as a negative number of feedback cases.
"""

from codevolve.core.errors import CodevolveError


class PromptSamplerError(CodevolveError):
    """The prompt sampler was called with invalid input; the message names it."""
