"""A problem users bring as one file: ``codevolve run --kernel-problem PATH.py``.

A format plug-in may read such files (core/plugin.py: ``ProblemFile``). The command line gives
``run`` and ``evaluate`` the format's option and its settings' options, reads the file (never
runs it), and the format turns its text into the files of a bundle (``bundle:<sha256>``), which
the job stores so that ``--resume`` and workers elsewhere find it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

SettingValue = int | str  # as typed: an integer, or text (a list is comma-separated)


@dataclass(frozen=True, slots=True)
class FileSetting:
    """One setting of the format's problems, an option of the commands that read its files."""

    name: str  # the setting as the format's refusals name it first: "seeds must be 1..16, ..."
    option: str  # "--judge-seeds"; a refusal starting with ``name`` is shown under it
    help: str
    default: SettingValue  # an int default makes an integer option
    metavar: str = ""

    @property
    def dest(self) -> str:
        return self.option.removeprefix("--").replace("-", "_")


@dataclass(frozen=True, slots=True)
class ProblemFile:
    """How a format reads a problem file.

    ``settings`` turns the settings' values (by name) into the format's own settings, raising a
    ConfigError whose message starts with the setting's name; ``read`` turns a file's text, its
    name (the file's stem) and those settings into the bundle's files, raising a ConfigError that
    names the file and the fault. Neither runs the file.
    """

    option: str  # "--kernel-problem"
    suffix: str  # ".py"
    help: str  # what the option takes: "a KernelBench-format problem file"
    format: str  # as refusals name it: "the KernelBench format"
    settings: Callable[[Mapping[str, SettingValue]], Any]
    read: Callable[[str, str, Any], Mapping[str, bytes]]
    options: tuple[FileSetting, ...] = ()

    @property
    def dest(self) -> str:
        return self.option.removeprefix("--").replace("-", "_")

    @property
    def usage(self) -> str:
        """The option as usage lines show it: ``--kernel-problem PATH.py``."""
        return f"{self.option} PATH{self.suffix}"
