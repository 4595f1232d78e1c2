"""``codevolve run --problem-dir PATH [--config FILE]``: a job on a problem folder.

The folder is loaded (OpenEvolve layout), its ``config.yaml`` mapped onto the job's
:class:`~codevolve.core.config.RunConfig` with the command's options on top
(:func:`~codevolve.services.run_config.bundle_run_config`), and the problem named
``bundle:<sha256>``. Only the files the evaluator needs are bundled, and a warning names those left
out (``codevolve.problems.openevolve.selection``). The run stores the files in the ``bundles``
table with the job, so that ``--resume`` and other processes find them. The evaluator is never
imported here: only the sandbox runs it. An API key written in ``config.yaml`` is held in this
process's environment for the LLM client, never stored.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from codevolve.core.config import RunConfig
from codevolve.core.errors import ConfigError
from codevolve.problems.openevolve import select_folder
from codevolve.problems.openevolve.bundle import CONFIG, BundleError
from codevolve.problems.openevolve.loaded import loaded_problem, openevolve_problem
from codevolve.problems.openevolve.problem import OpenEvolveProblem
from codevolve.services.cli import llm as cli_llm
from codevolve.services.cli.options import JOB_KEYS, config_error
from codevolve.services.run_config import RunConfigRefused, bundle_run_config


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--problem-dir", type=Path, help="a problem folder: initial_program.py, evaluator.py, ..."
    )
    run.add_argument(
        "--config", type=Path, help="with --problem-dir: the config to use (PATH/config.yaml)"
    )


class FolderConfig(NamedTuple):
    config: RunConfig
    warnings: tuple[str, ...]  # keys of the config file without effect here, one line each
    left_out: str | None  # one line naming the files left out of the bundle, if any were

    @property
    def all_warnings(self) -> tuple[str, ...]:
        return self.warnings if self.left_out is None else (*self.warnings, self.left_out)


def run_config_from_args(args: argparse.Namespace) -> FolderConfig:
    """The job config of ``run --problem-dir``: only options given on the command line override
    the folder's ``config.yaml``; with the warnings a run prints when it starts."""
    if args.problem:
        raise ConfigError("run: give a problem name or --problem-dir, not both")
    # The config's errors and warnings name the file typed (--config other.yaml), not the
    # config.yaml it stands in for in the bundle.
    config_file = CONFIG if args.config is None else str(args.config)
    with _naming_config(config_file):
        selection = select_folder(args.problem_dir, config=args.config)
        bundle = selection.bundle
        # A key written in config.yaml lives only in this process: the bundle and the job's
        # config name the variable that holds it (problems/openevolve/api_keys.py).
        os.environ.update(selection.api_keys)
        keys = {key: value for key in JOB_KEYS if (value := getattr(args, key, None)) is not None}
        fields: dict[str, Any] = {"label": folder_label(args.problem_dir, args.config)}
        proposer = _proposer_overrides(args, openevolve_problem(bundle).config.run_fields)
        if proposer is not None:
            fields["proposer"] = proposer
        try:
            config, config_warnings = bundle_run_config(bundle, keys, fields=fields)
        except RunConfigRefused as exc:  # an option the user typed: named as they typed it
            raise config_error(exc) from exc
    warnings = tuple(f"{config_file}: {warning}" for warning in config_warnings)
    return FolderConfig(config, warnings, selection.warning())


@contextmanager
def _naming_config(config_file: str) -> Iterator[None]:
    """A bundle error about ``config.yaml`` names ``config_file`` instead."""
    try:
        yield
    except BundleError as exc:
        about, colon, rest = str(exc).partition(":")
        if about != CONFIG or not colon or config_file == CONFIG:
            raise
        raise BundleError(f"{config_file}:{rest}") from exc


def folder_label(folder: Path, config: Path | None) -> str:
    """The folder's name, and its config file's when it is not the folder's config.yaml."""
    name = Path(folder).resolve().name or str(folder)
    if config is None or Path(config).resolve() == (Path(folder) / CONFIG).resolve():
        return name
    return f"{name}/{Path(config).name}"


def _proposer_overrides(
    args: argparse.Namespace, fields: Mapping[str, Any]
) -> dict[str, Any] | None:
    """``--proposer llm`` without ``--model`` asks the models ``config.yaml`` lists."""
    configured = fields.get("proposer", {}).get("models")
    if getattr(args, "proposer", None) == "llm" and not args.model and configured:
        return {"kind": "llm"}
    return cli_llm.proposer_overrides(args)


def parallel_evaluations(config: RunConfig) -> int | None:
    """The folder's ``evaluator.parallel_evaluations``: the run's workers unless --workers."""
    problem = loaded_problem(config.problem)
    return problem.config.parallel_evaluations if isinstance(problem, OpenEvolveProblem) else None
