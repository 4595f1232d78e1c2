"""Jobs on problem bundles (the OpenEvolve folder layout): from a folder or from the database.

``codevolve run --problem-dir PATH [--config FILE]`` loads the folder, maps its ``config.yaml``
onto the job's :class:`~codevolve.core.config.RunConfig` (the command's options win) and names the
problem ``bundle:<sha256>``. Only the files the evaluator needs are bundled, and a warning names
those left out (``codevolve.problems.openevolve.selection``). The files are stored in the
``bundles`` table with the job, so that ``--resume`` and other processes find them. The evaluator
is never imported here: only the sandbox runs it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.config import RunConfig
from codevolve.core.errors import ConfigError
from codevolve.problems.openevolve import (
    Bundle,
    BundleError,
    OpenEvolveProblem,
    loaded_problem,
    make_bundle,
    problem_of,
    select_folder,
)
from codevolve.problems.openevolve.bundle import CONFIG, NAME_PREFIX
from codevolve.problems.openevolve.config import SOURCES
from codevolve.problems.registry import get_problem
from codevolve.program_db.bundles import get_bundle, store_bundle
from codevolve.services.cli import llm as cli_llm

LOCAL_OWNER = "local"  # the owner of bundles stored by the command line


def is_bundle_name(problem: str) -> bool:
    return problem.startswith(NAME_PREFIX)


def run_config_for(
    bundle: Bundle, overrides: Mapping[str, Any]
) -> tuple[RunConfig, tuple[str, ...]]:
    """The job config of a bundle: its ``config.yaml`` mapped, then ``overrides`` on top; and the
    warnings about keys that did not carry over. BundleError names the key at fault."""
    problem = problem_of(bundle)
    fields = _merged(dict(problem.config.run_fields), overrides)
    fields["problem"] = bundle.name
    try:
        config = RunConfig.model_validate(fields)
    except ValidationError as exc:
        where = "; ".join(
            f"{_source(error['loc'])}: {error['msg']}" for error in exc.errors(include_url=False)
        )
        raise BundleError(f"{CONFIG} with the command's options: {where}") from exc
    return config, problem.config.warnings


async def prepare_problem(session: AsyncSession, name: str, *, owner: str = LOCAL_OWNER) -> None:
    """Make the job's problem resolvable in this process; a bundle is also stored.

    A bundle this process loaded (from a folder) is stored, once per content; one it has not is
    read from the database. Built-in names are checked, listing the known ones when unknown.
    """
    if not is_bundle_name(name):
        get_problem(name)
        return
    problem = loaded_problem(name)
    if problem is not None:
        files = problem.bundle.files
        await store_bundle(session, identity=problem.bundle.id, owner=owner, files=files)
        return
    stored = await get_bundle(session, name)
    if stored is None:
        raise ConfigError(f"{name}: no such bundle in this database")
    bundle = make_bundle(stored.files)
    if bundle.name != name:
        raise ConfigError(f"{name}: the stored files hash to {bundle.id}; the bundle is corrupt")
    problem_of(bundle)


def resolve_loaded(name: str) -> OpenEvolveProblem:
    """A bundle problem this process has loaded; what embedded workers resolve names with."""
    problem = loaded_problem(name)
    if problem is None:
        raise ConfigError(f"{name}: this process has not loaded that bundle")
    return problem


# ------------------------------------------------------------------ command line


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--problem-dir", type=Path, help="a problem folder: initial_program.py, evaluator.py, ..."
    )
    run.add_argument(
        "--config", type=Path, help="with --problem-dir: the config to use (PATH/config.yaml)"
    )


def run_config_from_args(args: argparse.Namespace) -> tuple[RunConfig, tuple[str, ...]]:
    """The job config of ``run --problem-dir``: only options given on the command line override
    the folder's ``config.yaml``. The warnings end with one naming the files left out of the
    bundle, if any were."""
    if args.problem:
        raise ConfigError("run: give a problem name or --problem-dir, not both")
    selection = select_folder(args.problem_dir, config=args.config)
    bundle = selection.bundle
    overrides: dict[str, Any] = {}
    for option, field in (
        ("proposals", "max_proposals"),
        ("seed", "seed"),
        ("islands", "islands"),
        ("max_wall_s", "max_wall_s"),
        ("in_flight", "max_in_flight"),
    ):
        value = getattr(args, option, None)
        if value is not None:
            overrides[field] = value
    proposer = _proposer_overrides(args, problem_of(bundle).config.run_fields)
    if proposer is not None:
        overrides["proposer"] = proposer
    config, config_warnings = run_config_for(bundle, overrides)
    warnings = tuple(f"{CONFIG}: {warning}" for warning in config_warnings)
    left_out = selection.warning()
    return config, warnings if left_out is None else (*warnings, left_out)


def _proposer_overrides(
    args: argparse.Namespace, fields: Mapping[str, Any]
) -> dict[str, Any] | None:
    """``--proposer llm`` without ``--model`` asks the models ``config.yaml`` lists."""
    configured = fields.get("proposer", {}).get("models")
    if getattr(args, "proposer", None) == "llm" and not args.model and configured:
        return {"kind": "llm"}
    return cli_llm.proposer_overrides(args)


def _merged(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            base[key] = _merged(dict(base[key]), value)
        else:
            base[key] = value
    return base


def _source(location: tuple[int | str, ...]) -> str:
    path = ".".join(str(part) for part in location)
    return SOURCES.get(path, path)
