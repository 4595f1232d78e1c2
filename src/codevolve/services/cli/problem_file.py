"""``codevolve run --kernel-problem PATH.py``: a job on one problem file of a format plug-in.

The options come from the installed plug-ins that read problem files (core/problem_file.py):
each gives its option (``--kernel-problem``) and its settings' options (``--judge-seeds``). The
file is read here and checked by its format, never run: only trusted code in a worker or a device
process executes it. The problem is a bundle of the files the format makes of it
(``bundle:<sha256>``), stored with the job so that ``--resume`` and workers elsewhere find it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from codevolve.core.config import RunConfig
from codevolve.core.errors import ConfigError
from codevolve.core.problem_file import ProblemFile, SettingValue
from codevolve.problems import registry
from codevolve.problems.openevolve import make_bundle, problem_of
from codevolve.services.cli import llm as cli_llm
from codevolve.services.cli.options import JOB_KEYS, config_error
from codevolve.services.run_config import RunConfigRefused, bundle_run_config

MAX_FILE_BYTES = 1 << 20


def formats() -> list[ProblemFile]:
    """The installed problem-file formats, plug-ins by name."""
    return [file for _, file in registry.problem_files()]


def add_settings_arguments(parser: argparse.ArgumentParser, file: ProblemFile) -> None:
    """The format's settings as options (``run`` and a format's own command share them)."""
    for setting in file.options:
        parser.add_argument(
            setting.option,
            type=int if isinstance(setting.default, int) else str,
            default=setting.default,
            help=setting.help,
            metavar=setting.metavar or None,
        )


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    for file in formats():
        run.add_argument(file.option, type=Path, metavar=f"PATH{file.suffix}", help=file.help)
        add_settings_arguments(run, file)


def given(args: argparse.Namespace) -> list[ProblemFile]:
    """The formats whose option ``args`` carries."""
    return [file for file in formats() if getattr(args, file.dest, None) is not None]


def one_of(words: Sequence[str]) -> str:
    """``a, b or c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def settings(file: ProblemFile, args: argparse.Namespace) -> Any:
    """The format's settings as typed; a refused value names its option."""
    values: dict[str, SettingValue] = {s.name: getattr(args, s.dest) for s in file.options}
    try:
        return file.settings(values)
    except ConfigError as exc:
        message = str(exc)
        for setting in file.options:
            if message.startswith(setting.name):
                raise ConfigError(f"{setting.option} {values[setting.name]}: {message}") from exc
        raise


def read_file(file: ProblemFile, path: Path, judged: Any) -> Mapping[str, bytes]:
    """The bundle files of the problem in ``path`` (ConfigError names the path and the fault)."""
    where = f"{file.option} {path}"
    if path.suffix != file.suffix:
        raise ConfigError(f"{where}: expected a {file.suffix} file in {file.format}")
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "no such file"
        raise ConfigError(f"{where}: {kind}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_FILE_BYTES} bytes")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot be read as UTF-8 text ({exc})") from exc
    return file.read(source, path.stem, judged)


def file_run_config(
    files: Mapping[str, bytes], args: argparse.Namespace, *, fields: dict[str, Any] | None = None
) -> RunConfig:
    """The job config of one problem file's bundle, built and loaded in this process."""
    bundle = make_bundle(dict(files))
    problem_of(bundle)
    keys = {key: value for key in JOB_KEYS if (value := getattr(args, key, None)) is not None}
    fields = dict(fields or {})
    proposer = cli_llm.proposer_overrides(args)
    if proposer is not None:
        fields["proposer"] = proposer
    try:
        config, _ = bundle_run_config(bundle, keys, fields=fields)
    except RunConfigRefused as exc:
        raise config_error(exc) from exc
    return config


def run_config_from_args(args: argparse.Namespace, file: ProblemFile) -> RunConfig:
    if args.problem or args.problem_dir is not None or len(given(args)) > 1:
        options = [f.option for f in formats()]
        raise ConfigError(
            f"run: give one of {one_of(['a problem name', '--problem-dir', *options])}"
        )
    judged = settings(file, args)
    path = Path(getattr(args, file.dest))
    return file_run_config(read_file(file, path, judged), args, fields={"label": path.name})
