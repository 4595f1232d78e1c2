"""The exception root of the ``problems`` package.

Problems judge candidates; a candidate's faults are failed stage results, never exceptions. These
errors are for invariants of the problems' own fixed data. An unknown problem name raises the
core :class:`~codevolve.core.errors.UnknownProblemError`, which callers already handle.
"""

from codevolve.core.errors import CodevolveError


class ProblemError(CodevolveError):
    """A built-in problem's own data or code broke an invariant."""


class PluginError(ProblemError):
    """An installed problem plug-in cannot be used: its entry point does not load, names
    something that is not a plug-in, or claims a name or a device job another one has."""
