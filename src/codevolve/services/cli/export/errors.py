"""The errors of ``codevolve export``: the root of the package's exceptions.

Each is a :class:`~codevolve.core.errors.ConfigError`, so the command line prints it as one
``error:`` line and exits 2 (nothing was written).
"""

from __future__ import annotations

from codevolve.core.errors import ConfigError


class ExportRefused(ConfigError):
    """The job cannot be exported in the format asked for: a job of another problem, no best
    program yet, or a program the format cannot hold; the message names the job and the way on."""
