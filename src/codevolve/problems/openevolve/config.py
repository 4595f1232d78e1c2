"""``config.yaml`` of an OpenEvolve-layout bundle, mapped onto codevolve's settings.

OpenEvolve's config mixes run settings (budget, seed, islands, prompt sizes: they become fields of
:class:`~codevolve.core.config.RunConfig`) with problem settings (the cascade's thresholds, feature
dimensions, the system message: they shape the problem built from the bundle). Every key is
accounted for: mapped, recognised but without a counterpart here, or unknown; the last two come
back as warnings, so a user sees what did not carry over.

Legacy keys are understood: ``llm.primary_model``/``secondary_model`` (and their ``_weight``) become
entries of ``llm.models``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from codevolve.core.problem import FeatureSpec
from codevolve.problems.openevolve import api_keys
from codevolve.problems.openevolve.bundle import CONFIG, BundleError

OPENEVOLVE_RETRIES = 3  # OpenEvolve's llm.retries when a config sets only llm.timeout
OPENEVOLVE_RETRY_DELAY = 5.0  # seconds, its llm.retry_delay
MIN_DELAY = 0.01  # seconds, the shortest first retry delay here
MAX_DEADLINE = 3600.0  # seconds, the longest proposal deadline a RunConfig takes
DEFAULT_BINS = 10  # OpenEvolve's default feature_bins
DEFAULT_FEATURES = ("complexity", "diversity")  # OpenEvolve's default feature_dimensions
COMPLEXITY = "complexity"  # built in: the program's length in characters
THRESHOLDS_REJECT = "cascade_thresholds_reject"  # evaluator.*: a codevolve key, not OpenEvolve's
DIVERSITY = "diversity"  # built in: how far the program's code is from the initial program's
UNSUPPORTED_FEATURES = frozenset({"score"})  # a cell per score band: the elite rule already ranks

# Keys OpenEvolve knows that have no counterpart here: warned as ignored, never unknown.
_IGNORED = {
    "": {
        "checkpoint_interval",
        "log_level",
        "log_dir",
        "language",
        "file_suffix",
        "early_stopping_patience",
        "convergence_threshold",
        "early_stopping_metric",
        "max_tasks_per_child",
        "evolution_trace",
    },
    "llm": {
        "top_p",
        "evaluator_models",
        "random_seed",
        "reasoning_effort",
        "system_message",
        "name",
        "manual_mode",
    },
    "prompt": {
        "template_dir",
        "evaluator_system_message",
        "use_template_stochasticity",
        "template_variations",
        "use_meta_prompting",
        "meta_prompt_weight",
        "include_artifacts",
        "max_artifact_bytes",
        "artifact_security_filter",
        "suggest_simplification_after_chars",
        "include_changes_under_chars",
        "concise_implementation_max_lines",
        "comprehensive_implementation_min_lines",
        "code_length_threshold",
        "programs_as_changes_description",
    },
    "database": {
        "db_path",
        "in_memory",
        "log_prompts",
        "population_size",
        "elite_selection_ratio",
        "exploration_ratio",
        "diversity_metric",
        "diversity_reference_size",
        "random_seed",
        "artifacts_base_path",
        "artifact_size_threshold",
        "cleanup_old_artifacts",
        "artifact_retention_days",
        "novelty_llm",
        "embedding_model",
    },
    "evaluator": {
        "max_retries",
        "cpu_limit",
        "distributed",
        "use_llm_feedback",
        "llm_feedback_weight",
        "enable_artifacts",
        "max_artifact_storage",
    },
}
_SECTIONS = ("llm", "prompt", "database", "evaluator")

# Where each RunConfig field set here comes from, to name the key when a value is refused.
SOURCES = {
    "max_proposals": "max_iterations",
    "seed": "random_seed",
    "max_code_length": "max_code_length",
    "top_inspirations": "prompt.num_top_programs",
    "diverse_inspirations": "prompt.num_diverse_programs",
    "islands": "database.num_islands",
    "migration_interval": "database.migration_interval",
    "exploit_ratio": "database.exploitation_ratio",
    "novelty_threshold": "database.similarity_threshold",
    "migrants": "database.migration_rate",
    "sandbox.wall_s": "evaluator.timeout",
    "sandbox.cpu_s": "evaluator.timeout",
    "sandbox.memory_mb": "evaluator.memory_limit_mb",
    "proposer.max_attempts": "llm.retries",
    "proposer.backoff_s": "llm.retry_delay",
    "proposer.deadline_s": "llm.timeout",
    "proposer.models.*.temperature": "llm.temperature",
    "proposer.models.*.max_tokens": "llm.max_tokens",
    "proposer.models.*.timeout_s": "llm.timeout",
}


@dataclass(frozen=True, slots=True)
class BundleConfig:
    """What ``config.yaml`` says, split into run fields and problem settings."""

    run_fields: Mapping[str, Any]  # RunConfig field -> value, validated with the RunConfig
    cascade: bool = True
    thresholds: tuple[float, ...] = ()
    # codevolve's own key: True makes each threshold a gate that rejects a program below it
    # (it never enters the archive); OpenEvolve's default, False, only stops the cascade there.
    thresholds_reject: bool = False
    feature_dimensions: tuple[str, ...] = DEFAULT_FEATURES
    feature_bins: Mapping[str, int] | None = None  # per dimension; None: DEFAULT_BINS each
    system_message: str = ""
    diff_based: bool = True
    parallel_evaluations: int | None = None  # evaluator.parallel_evaluations: workers of a run
    warnings: tuple[str, ...] = ()

    def features(self, *, initial_length: int) -> tuple[FeatureSpec, ...]:
        """MAP-Elites descriptors: ``complexity`` spans half to twice the initial program's
        length; ``diversity`` (``core.similarity.distance_feature`` from the initial program)
        and a metric the evaluator returns span [0, 1]. ``score`` is left out."""
        specs = []
        for name in self.feature_dimensions:
            if name in UNSUPPORTED_FEATURES:
                continue
            bins = (self.feature_bins or {}).get(name, DEFAULT_BINS)
            if name == COMPLEXITY:
                low, high = 0.5 * initial_length, 2.0 * initial_length + 1
                specs.append(FeatureSpec(name, low=low, high=high, bins=bins))
            else:
                specs.append(FeatureSpec(name, low=0.0, high=1.0, bins=bins))
        return tuple(specs)


def read_config(text: str) -> BundleConfig:
    """Parse ``config.yaml``; BundleError names the key at fault."""
    try:
        raw = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise BundleError(f"{CONFIG}: not valid YAML: {exc}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise BundleError(f"{CONFIG}: the top level must be a mapping")
    return _Reader(raw).read()


class _Reader:
    """Consumes the keys it maps; whatever is left is warned about."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self._raw = {str(key): value for key, value in raw.items()}
        self._sections = {name: self._section(name) for name in _SECTIONS}
        self._run: dict[str, Any] = {}
        self._warnings: list[str] = []

    def read(self) -> BundleConfig:
        top, llm = self._raw, self._sections["llm"]
        prompt, database = self._sections["prompt"], self._sections["database"]
        evaluator = self._sections["evaluator"]
        self._map(top, "max_iterations", "max_proposals", int)
        seed = top.pop("random_seed", None)
        if seed is not None:
            self._run["seed"] = self._number("random_seed", seed, int)
        self._map(top, "max_code_length", "max_code_length", int)
        diff_based = bool(top.pop("diff_based_evolution", True))
        if not diff_based:
            self._warnings.append(
                "diff_based_evolution: false has no effect; proposers may answer with diffs "
                "or full rewrites"
            )
        self._map(prompt, "num_top_programs", "top_inspirations", int, "prompt.")
        self._map(prompt, "num_diverse_programs", "diverse_inspirations", int, "prompt.")
        system_message = prompt.pop("system_message", "") or ""
        if not isinstance(system_message, str):
            raise BundleError(f"{CONFIG}: prompt.system_message must be text")
        self._map(database, "num_islands", "islands", int, "database.")
        self._map(database, "migration_interval", "migration_interval", int, "database.")
        self._map(database, "exploitation_ratio", "exploit_ratio", float, "database.")
        self._map(database, "similarity_threshold", "novelty_threshold", float, "database.")
        features = self._features(database)
        bins = self._bins(database, features)
        rate = database.pop("migration_rate", None)
        if rate is not None:
            # OpenEvolve migrates this share of an island; an island here holds one elite per cell.
            cells = math.prod(
                (bins or {}).get(f, DEFAULT_BINS) for f in features if f not in UNSUPPORTED_FEATURES
            )
            share = self._number("database.migration_rate", rate, float)
            self._run["migrants"] = max(1, round(share * max(cells, 1)))
        self._sandbox(evaluator)
        parallel = evaluator.pop("parallel_evaluations", None)
        if parallel is not None:
            parallel = self._number("evaluator.parallel_evaluations", parallel, int)
            if parallel < 1:
                raise BundleError(f"{CONFIG}: evaluator.parallel_evaluations must be at least 1")
        cascade = bool(evaluator.pop("cascade_evaluation", True))
        thresholds = self._thresholds(evaluator)
        thresholds_reject = evaluator.pop(THRESHOLDS_REJECT, False)
        if not isinstance(thresholds_reject, bool):
            key = f"evaluator.{THRESHOLDS_REJECT}"
            raise BundleError(f"{CONFIG}: {key} must be true or false, not {thresholds_reject!r}")
        self._models(llm)
        self._leftovers()
        return BundleConfig(
            run_fields=self._run,
            cascade=cascade,
            thresholds=thresholds,
            thresholds_reject=thresholds_reject,
            feature_dimensions=features,
            feature_bins=bins,
            system_message=system_message,
            diff_based=diff_based,
            parallel_evaluations=parallel,
            warnings=tuple(self._warnings),
        )

    def _section(self, name: str) -> dict[str, Any]:
        value = self._raw.pop(name, None)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise BundleError(f"{CONFIG}: {name} must be a mapping")
        return {str(key): item for key, item in value.items()}

    def _map(
        self, section: dict[str, Any], key: str, field: str, kind: type, prefix: str = ""
    ) -> None:
        value = section.pop(key, None)
        if value is not None:
            self._run[field] = self._number(prefix + key, value, kind)

    @staticmethod
    def _number(where: str, value: Any, kind: type) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BundleError(f"{CONFIG}: {where} must be a number, not {value!r}")
        if not math.isfinite(value):  # YAML's .nan and .inf; how large a value may be is the
            # run config's to say (services.run_config.CAPS), whatever the source
            raise BundleError(f"{CONFIG}: {where} must be a finite number, got {value}")
        if kind is int and value != int(value):
            raise BundleError(f"{CONFIG}: {where} must be a whole number, not {value!r}")
        return kind(value)

    def _features(self, database: dict[str, Any]) -> tuple[str, ...]:
        value = database.pop("feature_dimensions", None)
        if value is None:
            return DEFAULT_FEATURES
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            features = tuple(value)
        else:
            raise BundleError(f"{CONFIG}: database.feature_dimensions must be a list of names")
        for name in features:
            if name in UNSUPPORTED_FEATURES:
                self._warnings.append(
                    f"database.feature_dimensions: {name!r} is not supported and is left out"
                )
        return features

    def _bins(self, database: dict[str, Any], features: tuple[str, ...]) -> dict[str, int] | None:
        value = database.pop("feature_bins", None)
        archive = database.pop("archive_size", None)
        if archive is not None and not isinstance(value, dict):
            # OpenEvolve gives each dimension enough bins for the archive to hold this many cells
            size = self._number("database.archive_size", archive, int)
            dimensions = max(len([f for f in features if f not in UNSUPPORTED_FEATURES]), 1)
            least = math.ceil(size ** (1 / dimensions) - 1e-9)
            given = (
                DEFAULT_BINS if value is None else self._number("database.feature_bins", value, int)
            )
            value = max(given, least)
        if value is None:
            return None
        if isinstance(value, dict):
            bins = {
                str(k): self._number(f"database.feature_bins.{k}", v, int) for k, v in value.items()
            }
        else:
            count = self._number("database.feature_bins", value, int)
            bins = {name: count for name in features}
        if any(count < 1 for count in bins.values()):
            raise BundleError(f"{CONFIG}: database.feature_bins must be at least 1")
        return bins

    def _sandbox(self, evaluator: dict[str, Any]) -> None:
        limits: dict[str, Any] = {}
        timeout = evaluator.pop("timeout", None)
        if timeout is not None:
            seconds = self._number("evaluator.timeout", timeout, float)
            limits.update(wall_s=seconds, cpu_s=seconds)
        memory = evaluator.pop("memory_limit_mb", None)
        if memory is not None:
            limits["memory_mb"] = self._number("evaluator.memory_limit_mb", memory, int)
        if limits:
            self._run["sandbox"] = limits

    def _thresholds(self, evaluator: dict[str, Any]) -> tuple[float, ...]:
        value = evaluator.pop("cascade_thresholds", None)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise BundleError(f"{CONFIG}: evaluator.cascade_thresholds must be a list")
        return tuple(
            self._number(f"evaluator.cascade_thresholds[{i}]", v, float)
            for i, v in enumerate(value)
        )

    def _models(self, llm: dict[str, Any]) -> None:
        """``llm.models`` (and the legacy primary/secondary pair) become ``proposer.models``; the
        shared settings (``temperature``, ``max_tokens``, ``timeout``, ``api_key``) apply to each
        model that does not set its own, ``retries`` and ``retry_delay`` to the proposer."""
        api_base = llm.pop("api_base", None)
        shared = self._model_settings("llm.", llm)
        models: list[dict[str, Any]] = []
        listed = llm.pop("models", None) or []
        if not isinstance(listed, list):
            raise BundleError(f"{CONFIG}: llm.models must be a list")
        for index, entry in enumerate(listed):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise BundleError(f"{CONFIG}: llm.models[{index}] needs a name")
            entry = dict(entry)
            weight = self._number(f"llm.models[{index}].weight", entry.pop("weight", 1.0), float)
            name, base = entry.pop("name"), entry.pop("api_base", None) or api_base
            own = self._model_settings(f"llm.models[{index}].", entry)
            models.append({**_model(name, weight, base), **shared, **own})
            if entry:
                self._warnings.append(f"llm.models[{index}]: {', '.join(sorted(entry))} ignored")
        for legacy in ("primary_model", "secondary_model"):
            name = llm.pop(legacy, None)
            weight = llm.pop(f"{legacy}_weight", None)
            if name is None:
                continue
            if not isinstance(name, str):
                raise BundleError(f"{CONFIG}: llm.{legacy} must be a model name")
            share = 1.0 if weight is None else self._number(f"llm.{legacy}_weight", weight, float)
            if share > 0:
                models.append({**_model(name, share, api_base), **shared})
        proposer = self._retries(llm, shared.get("timeout_s"))
        if models:
            proposer["models"] = models
            self._warnings.append(
                "llm: models mapped to proposer.models; they are asked only by the llm proposer"
            )
        if proposer:
            self._run["proposer"] = proposer

    def _model_settings(self, where: str, section: dict[str, Any]) -> dict[str, Any]:
        """The ModelConfig fields a section of ``llm`` sets (popped from it)."""
        settings: dict[str, Any] = {}
        for key, field, kind in _MODEL_SETTINGS:
            value = section.pop(key, None)
            if value is not None:
                settings[field] = self._number(where + key, value, kind)
        key = section.pop("api_key", None)
        if key is not None:
            if not isinstance(key, str):
                raise BundleError(f"{CONFIG}: {where}api_key must be text")
            variable = api_keys.reference(key)
            if variable is None:  # a literal key: only in a config that no bundle holds yet
                variable = api_keys.literal_variable(where)
            settings["api_key_env"] = variable
        return settings

    def _retries(self, llm: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        """``retries`` (after the first request) and ``retry_delay`` (seconds before a retry);
        with ``timeout`` (per request), the proposal's deadline lets every attempt run its
        full time, as OpenEvolve does."""
        proposer: dict[str, Any] = {}
        retries = llm.pop("retries", None)
        if retries is not None:
            proposer["max_attempts"] = self._number("llm.retries", retries, int) + 1
        delay = llm.pop("retry_delay", None)
        if delay is not None:
            # OpenEvolve waits this long before each retry; here it is the first wait, doubled
            # after each further failure. No wait at all is taken as the shortest one allowed.
            proposer["backoff_s"] = max(self._number("llm.retry_delay", delay, float), MIN_DELAY)
        if timeout_s is not None:
            attempts = proposer.get("max_attempts", OPENEVOLVE_RETRIES + 1)
            waits = proposer.get("backoff_s", OPENEVOLVE_RETRY_DELAY) * (2 ** (attempts - 1) - 1)
            proposer["deadline_s"] = min(MAX_DEADLINE, timeout_s * attempts + waits)
        return proposer

    def _leftovers(self) -> None:
        sections = {"": self._raw, **self._sections}
        for section, keys in sections.items():
            for key in sorted(keys):
                where = f"{section}.{key}" if section else key
                if key in _IGNORED.get(section, set()):
                    self._warnings.append(f"{where}: recognised but has no effect here; ignored")
                else:
                    self._warnings.append(f"{where}: unknown key; ignored")


_MODEL_SETTINGS = (
    ("temperature", "temperature", float),
    ("max_tokens", "max_tokens", int),
    ("timeout", "timeout_s", float),
)


def _model(name: str, weight: float, api_base: object) -> dict[str, Any]:
    model: dict[str, Any] = {"name": name, "weight": weight}
    if isinstance(api_base, str) and api_base:
        model["base_url"] = api_base
    return model
