"""The root of codevolve's exception hierarchy.

Each package derives its own errors from :class:`CodevolveError`. Expected outcomes (a diff that
does not apply, a timeout, a rejected program) are values, not exceptions; exceptions are for bad
input and broken invariants.
"""


class CodevolveError(Exception):
    """Base class of every error codevolve raises on purpose."""


class ConfigError(CodevolveError):
    """A configuration value or an input file is invalid; the message names the field."""


class UnknownProblemError(ConfigError):
    """A problem name is not registered; the message lists the known ones."""
