"""A job's config as users write it, and the one function that turns it into a RunConfig.

The command line and the API take the same keys (``proposals``, ``in_flight``, ...): the API as
JSON keys, the command line as options (``--proposals``, ``--in-flight``). :data:`NAMES` is the
one map between what users type and :class:`~codevolve.core.config.RunConfig` fields, and
:func:`run_config_of` the one function both front ends call. When the config refuses a value,
:class:`RunConfigRefused` says where, so each front end names it as its user typed it: the
command line ``--proposals must be at least 1, got 0``, the API the JSON key ``proposals``.

A problem bundle's ``config.yaml`` is mapped here too (:func:`bundle_run_config`): its fields
first, what the user typed on top; a refused value names the ``config.yaml`` key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from codevolve.core.config import RunConfig
from codevolve.core.errors import ConfigError
from codevolve.problems.openevolve import Bundle, BundleError, OpenEvolveProblem, problem_of
from codevolve.problems.openevolve.bundle import CONFIG
from codevolve.problems.openevolve.config import SOURCES

EMPTY: Mapping[str, Any] = MappingProxyType({})

# RunConfig field (dotted for a nested one; ``*`` stands for a list index) -> (the API's JSON key,
# the command line's option); None where that front end does not set the field.
NAMES: dict[str, tuple[str | None, str | None]] = {
    "problem": (None, "PROBLEM"),
    "seed": ("seed", "--seed"),
    "max_proposals": ("proposals", "--proposals"),
    "max_wall_s": ("max_wall_s", "--max-wall-s"),
    "islands": ("islands", "--islands"),
    "max_in_flight": ("in_flight", "--in-flight"),
    "remeasure_samples": ("remeasure_samples", "--remeasure-samples"),
    "exploit_ratio": ("exploit_ratio", None),
    "migration_interval": ("migration_interval", None),
    "migrants": ("migrants", None),
    "reset_interval": ("reset_interval", None),
    "proposer.max_cost_usd": (None, "--max-cost"),
    "proposer.deadline_s": (None, "--deadline-s"),
    "proposer.models": (None, "--model"),
    "proposer.models.*.name": (None, "--model"),
    "proposer.models.*.weight": (None, "--model NAME:WEIGHT"),
    "proposer.models.*.temperature": (None, "--temperature"),
    "proposer.models.*.max_tokens": (None, "--max-tokens"),
    "proposer.models.*.max_concurrency": (None, "--llm-concurrency"),
    "proposer.models.*.price_in": (None, "--price"),
    "proposer.models.*.price_out": (None, "--price"),
}
# The key users type (a JSON key; an option without its ``--``, ``-`` as ``_``) -> its field.
FIELD_OF: dict[str, str] = {key: field for field, (key, _) in NAMES.items() if key is not None}

MAX_PROPOSALS = 10_000_000  # a budget beyond this is a typo, not a plan
# The largest value users may give a RunConfig field, whatever the source: the API's schema
# (JobConfigIn reads its bounds here), a bundle's config.yaml, the command line. RunConfig keeps
# the lower bounds; these caps keep a typo from becoming a job that never ends or a number the
# database cannot store. Every capped value must also be finite.
CAPS: dict[str, int | float] = {
    "seed": 2**32 - 1,
    "max_proposals": MAX_PROPOSALS,
    "max_wall_s": 30 * 86400,  # seconds
    "islands": 256,
    "max_in_flight": 4096,
    "remeasure_samples": 100,
    "exploit_ratio": 1,
    "migration_interval": MAX_PROPOSALS,
    "migrants": 64,
    "reset_interval": MAX_PROPOSALS,
    "max_code_length": 1 << 20,  # characters; a bundle holds 16 MiB at most
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """One value the RunConfig refused, where it sits and why."""

    location: tuple[int | str, ...]  # in the RunConfig, e.g. ("max_proposals",)
    message: str  # pydantic's words, e.g. "Input should be greater than or equal to 1"
    kind: str  # pydantic's error type, e.g. "greater_than_equal"
    requirement: str  # in the project's words, e.g. "must be at least 1, got 0"

    @property
    def path(self) -> str:
        """The location as written, e.g. ``proposer.models.0.temperature``."""
        return ".".join(str(part) for part in self.location)

    @property
    def dotted(self) -> str:
        """The location as :data:`NAMES` keys it (list indices as ``*``)."""
        return ".".join("*" if isinstance(part, int) else part for part in self.location)

    @property
    def option(self) -> str | None:
        """The command-line option that sets the refused field, if one does."""
        return NAMES.get(self.dotted, (None, None))[1]

    @property
    def key(self) -> str | None:
        """The API's JSON key that sets the refused field, if one does."""
        return NAMES.get(self.dotted, (None, None))[0]


class RunConfigRefused(ConfigError):
    """The RunConfig refused what the user gave; ``refusals`` says what and where."""

    def __init__(self, refusals: Sequence[Refusal]) -> None:
        super().__init__("; ".join(f"{r.path} {r.requirement}" for r in refusals))
        self.refusals = tuple(refusals)


def run_config_of(
    keys: Mapping[str, Any] = EMPTY, *, fields: Mapping[str, Any] = EMPTY
) -> RunConfig:
    """The RunConfig of ``keys`` (named as users type them: ``proposals``, ``in_flight``) on top
    of ``fields`` (RunConfig field names: the problem, a proposer section, further fields).

    :class:`RunConfigRefused` lists every refused value."""
    return _validated(config_fields(keys, fields=fields))


def _validated(given: Mapping[str, Any]) -> RunConfig:
    """The RunConfig of ``given`` within :data:`CAPS`; RunConfigRefused lists what is not."""
    over = over_caps(given)
    if over:
        raise RunConfigRefused(over)
    try:
        return RunConfig.model_validate(given)
    except ValidationError as exc:
        raise RunConfigRefused(refusals_of(exc)) from exc


def over_caps(given: Mapping[str, Any]) -> tuple[Refusal, ...]:
    """The values of ``given`` (RunConfig fields) above their cap or not finite; values that are
    not numbers are left to the RunConfig's own checks."""
    refusals = []
    for field, cap in CAPS.items():
        value = given.get(field)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            message = "Input should be a finite number"
            refusals.append(
                Refusal((field,), message, "finite_number", f"must be a finite number, got {value}")
            )
        elif value > cap:
            message = f"Input should be less than or equal to {cap}"
            refusals.append(
                Refusal((field,), message, "less_than_equal", f"must be at most {cap}, got {value}")
            )
    return tuple(refusals)


def config_fields(
    keys: Mapping[str, Any] = EMPTY, *, fields: Mapping[str, Any] = EMPTY
) -> dict[str, Any]:
    """RunConfig fields and values: ``fields``, with ``keys`` renamed to fields on top. A key
    outside :data:`FIELD_OF` is a KeyError: front ends only pass keys they declared."""
    return merged(dict(fields), {FIELD_OF[key]: value for key, value in keys.items()})


def bundle_run_config(
    bundle: Bundle, keys: Mapping[str, Any] = EMPTY, *, fields: Mapping[str, Any] = EMPTY
) -> tuple[RunConfig, tuple[str, ...]]:
    """The job config of a bundle: its ``config.yaml`` mapped, then ``fields`` and ``keys`` on
    top; and the warnings about ``config.yaml`` keys that did not carry over. BundleError names
    the key at fault."""
    problem = problem_of(bundle)
    # A format plug-in's bundle (a KernelBench file's) has no config.yaml: its settings are its own.
    folder = problem.config if isinstance(problem, OpenEvolveProblem) else None
    users = config_fields(keys, fields=fields)
    given = merged(dict(folder.run_fields) if folder else {}, users)
    given["problem"] = bundle.name
    try:
        config = _validated(given)
    except RunConfigRefused as exc:
        # A value the user typed is named as they typed it (RunConfigRefused); only what came
        # from the folder's config.yaml is named by its key there.
        theirs = [r for r in exc.refusals if _given(users, r.location)]
        if theirs:
            raise RunConfigRefused(theirs) from exc
        raise BundleError("; ".join(_from_config_yaml(r) for r in exc.refusals)) from exc
    return config, folder.warnings if folder else ()


def _from_config_yaml(refusal: Refusal) -> str:
    """``config.yaml: max_iterations must be at most ...``; a refusal of the whole config (one
    field against another) may come of the command's options too."""
    if not refusal.location:
        reason = refusal.message.removeprefix("Value error, ")
        return f"{CONFIG} with the command's options: {reason}"
    return f"{CONFIG}: {_source(refusal.location)} {refusal.requirement}"


def refusals_of(exc: ValidationError) -> tuple[Refusal, ...]:
    """Each error of a RunConfig validation, with its requirement in the project's words."""
    return tuple(
        Refusal(
            location=tuple(error["loc"]),
            message=str(error["msg"]),
            kind=error["type"],
            requirement=_requirement(error),
        )
        for error in exc.errors(include_url=False)
    )


def merged(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` on top of ``base``; nested sections are merged key by key."""
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            base[key] = merged(dict(base[key]), value)
        else:
            base[key] = value
    return base


def _requirement(error: Any) -> str:
    bound = error.get("ctx", {})
    given = error.get("input")
    kind = error["type"]
    words = {
        "greater_than_equal": f"must be at least {bound.get('ge')}",
        "greater_than": f"must be more than {bound.get('gt')}",
        "less_than_equal": f"must be at most {bound.get('le')}",
        "less_than": f"must be less than {bound.get('lt')}",
    }.get(kind)
    if words is None:
        message = str(error["msg"]).removeprefix("Value error, ")
        return f"is invalid: {message}" if given is None else f"is invalid: {message}, got {given}"
    return f"{words}, got {given}"


def _source(location: Sequence[int | str]) -> str:
    path = ".".join(str(part) for part in location)
    pattern = ".".join("*" if isinstance(part, int) else str(part) for part in location)
    return SOURCES.get(path) or SOURCES.get(pattern, path)


def _given(fields: Mapping[str, Any], location: Sequence[int | str]) -> bool:
    """Whether the value at ``location`` is one the user gave in ``fields`` (walked through
    nested sections and lists), not one that came from ``config.yaml``."""
    here: Any = fields
    for part in location:
        in_section = isinstance(here, Mapping) and isinstance(part, str) and part in here
        in_list = isinstance(here, Sequence) and isinstance(part, int) and part < len(here)
        if not (in_section or in_list):
            return False
        here = here[part]
    return True
