"""A problem built from an OpenEvolve-layout bundle; its stages run ``evaluator.py`` in the sandbox.

Each stage calls one evaluator function (``evaluate``, or ``evaluate_stage1..3`` as a cascade) on
the candidate, in a fresh sandboxed child (see ``_harness.py``); this process only reads back plain
data, checks it and judges it. The evaluator is never imported here.

Fitness follows OpenEvolve: ``combined_score`` when present, else the mean of the numeric metrics
(booleans, NaN and feature dimensions left out); higher is better. Stage N+1 runs when stage N's
fitness is at least ``evaluator.cascade_thresholds[N-1]`` (no threshold listed: it runs); a program
below it stops there and is kept with the stages it ran, as in OpenEvolve (with
``evaluator.cascade_thresholds_reject: true``, codevolve's own key, it is rejected instead). Text
metrics (error strings), non-finite values, artifacts (``llm_feedback``, tracebacks) and the
evaluator's stderr become the stage's feedback, which children's prompts show.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import numpy as np

from codevolve.core.problem import (
    Baseline,
    Candidate,
    FeatureSpec,
    JSONValue,
    Mutation,
    SandboxReply,
    Stage,
    Threshold,
)
from codevolve.core.program import StageResult
from codevolve.core.prompt import ProgramView
from codevolve.core.similarity import Tokens, code_tokens, distance_feature
from codevolve.problems.openevolve.bundle import EVALUATOR, Bundle, evaluator_functions
from codevolve.problems.openevolve.config import COMPLEXITY, DIVERSITY, BundleConfig, read_config

HARNESS_ENTRY = "run_evaluator"
COMBINED = "combined_score"
OUTPUT_TAIL_CHARS = 2_000  # characters of the evaluator's stderr/stdout kept in feedback
MAX_METRICS = 256  # metrics kept per stage; a program's row must stay small
MAX_ARTIFACT_CHARS = 65_536  # characters of artifacts kept per stage, all together
DEFAULT_DESCRIPTION = (
    "Improve the program so that the evaluator (evaluator.py) scores it higher: its "
    "combined_score when it reports one, else the mean of its numeric metrics."
)

MetricValue = bool | float | str


@cache
def harness_source() -> str:
    """The text of ``_harness.py``: sent to the sandbox, never imported here."""
    package = resources.files("codevolve.problems.openevolve")
    return package.joinpath("_harness.py").read_text(encoding="utf-8")


def fitness(metrics: Mapping[str, MetricValue], *, features: Sequence[str] = ()) -> float | None:
    """``combined_score`` if it is a finite number, else the mean of the finite numeric metrics
    that are neither booleans nor feature dimensions; None when there is none."""
    combined = _as_number(metrics.get(COMBINED))
    if combined is not None:
        return combined
    values = [
        number
        for name, value in metrics.items()
        if name not in features and (number := _as_number(value)) is not None
    ]
    return sum(values) / len(values) if values else None


def _as_number(value: MetricValue | None) -> float | None:
    if value is None or isinstance(value, bool | str):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


@dataclass(frozen=True, slots=True)
class EvaluatorOutcome:
    """One evaluator call as read back from the sandbox, checked."""

    metrics: Mapping[str, MetricValue] = field(default_factory=dict)
    nonfinite: Mapping[str, str] = field(default_factory=dict)  # name -> "nan", "inf", "-inf"
    artifacts: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    traceback: str = ""


def read_outcome(value: JSONValue) -> EvaluatorOutcome | str:
    """The harness's reply as an outcome, or why it is not a valid one."""
    if not isinstance(value, dict):
        return "the evaluator harness did not answer a mapping"
    metrics, nonfinite = value.get("metrics"), value.get("nonfinite")
    artifacts, error, trace = value.get("artifacts"), value.get("error"), value.get("traceback")
    if not (isinstance(metrics, dict) and isinstance(nonfinite, dict)):
        return "the evaluator harness answered without metrics"
    if not isinstance(artifacts, dict) or not all(isinstance(v, str) for v in artifacts.values()):
        return "the evaluator harness answered artifacts that are not text"
    if not all(isinstance(v, bool | int | float | str) for v in metrics.values()):
        return "the evaluator harness answered a metric that is not a number or text"
    if not all(isinstance(v, str) for v in nonfinite.values()):
        return "the evaluator harness answered malformed non-finite metrics"
    if not (error is None or isinstance(error, str)) or not isinstance(trace, str):
        return "the evaluator harness answered a malformed error"
    plain: dict[str, MetricValue] = {
        name: (item if isinstance(item, bool | str) else float(item))
        for name, item in list(metrics.items())[:MAX_METRICS]
        if isinstance(item, bool | int | float | str)
    }
    return EvaluatorOutcome(
        metrics=plain,
        nonfinite={name: str(item) for name, item in list(nonfinite.items())[:MAX_METRICS]},
        artifacts=_bounded({name: str(item) for name, item in artifacts.items()}),
        error=error,
        traceback=trace,
    )


def _bounded(artifacts: dict[str, str]) -> dict[str, str]:
    """At most MAX_ARTIFACT_CHARS of artifacts in all; ``llm_feedback`` is kept first."""
    kept: dict[str, str] = {}
    room = MAX_ARTIFACT_CHARS
    for name in sorted(artifacts, key=lambda key: key != "llm_feedback"):
        if room <= 0:
            break
        text = artifacts[name]
        kept[name] = text if len(text) <= room else text[:room] + "\n[truncated]"
        room -= len(kept[name])
    return kept


@dataclass(frozen=True, slots=True)
class EvaluatorStage:
    """Calls ``function`` of the bundle's evaluator on the candidate, in the sandbox."""

    name: str
    function: str
    threshold: Threshold | None
    files: Mapping[str, str] = field(repr=False)  # path -> base64
    suffix: str
    feature_names: tuple[str, ...]
    initial_tokens: Tokens = field(default=(), repr=False)  # diversity is measured from these

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        del rng  # the evaluator draws its own inputs
        args: list[JSONValue] = [
            dict(self.files),
            EVALUATOR,
            self.function,
            candidate.source,
            self.suffix,
        ]
        reply = candidate.call_harness(harness_source(), HARNESS_ENTRY, [args])
        output = _output_artifacts(reply)
        if not reply.ok or not reply.values:
            kind = reply.error_kind.value if reply.error_kind is not None else "error"
            return self._failed(f"{kind}: {reply.error}", output)
        outcome = read_outcome(reply.values[0])
        if isinstance(outcome, str):
            return self._failed(f"invalid_output: {outcome}", output)
        artifacts = {**outcome.artifacts, **output}
        if outcome.traceback:
            artifacts["traceback"] = outcome.traceback
        feedback = _feedback(outcome, artifacts)
        if outcome.error is not None:
            return self._failed(f"exception: {outcome.error}", artifacts, feedback)
        if COMBINED in outcome.nonfinite:
            error = f"{COMBINED} is {outcome.nonfinite[COMBINED]}, not a finite number"
            return self._failed(error, artifacts, feedback)
        score = fitness(outcome.metrics, features=self.feature_names)
        if score is None:
            error = f"{self.function} returned no finite numeric metric"
            return self._failed(error, artifacts, feedback)
        metrics = {
            name: float(value)
            for name, value in outcome.metrics.items()
            if not isinstance(value, str)
        }
        features = {name: metrics[name] for name in self.feature_names if name in metrics}
        if COMPLEXITY in self.feature_names:
            features[COMPLEXITY] = float(len(candidate.source))
        if DIVERSITY in self.feature_names and DIVERSITY not in features:
            tokens = code_tokens(candidate.source)
            features[DIVERSITY] = distance_feature(tokens, self.initial_tokens)
        return StageResult(
            stage=self.name,
            passed=True,
            score=score,
            metrics=metrics,
            features=features,
            feedback=feedback,
            artifacts=artifacts,
        )

    def _failed(self, error: str, artifacts: Mapping[str, str], feedback: str = "") -> StageResult:
        if not feedback:
            feedback = _artifact_text(artifacts)
        return StageResult(
            stage=self.name,
            passed=False,
            score=None,
            error=error,
            feedback=feedback,
            artifacts=dict(artifacts),
        )


def _output_artifacts(reply: SandboxReply) -> dict[str, str]:
    shown = {"stderr": reply.stderr, "stdout": reply.stdout}
    return {name: text[-OUTPUT_TAIL_CHARS:] for name, text in shown.items() if text.strip()}


def _feedback(outcome: EvaluatorOutcome, artifacts: Mapping[str, str]) -> str:
    """What a proposer should read: artifacts first (``llm_feedback`` leads), then text metrics
    and values left out of the score."""
    lines = [_artifact_text(artifacts)] if artifacts else []
    lines += [f"{n}: {v}" for n, v in outcome.metrics.items() if isinstance(v, str)]
    lines += [f"{n} is {v}; left out of the score" for n, v in outcome.nonfinite.items()]
    return "\n".join(line for line in lines if line)


def _artifact_text(artifacts: Mapping[str, str]) -> str:
    order = sorted(artifacts, key=lambda name: (name != "llm_feedback", name == "stdout", name))
    return "\n".join(f"{name}:\n{artifacts[name].strip()}" for name in order)


class OpenEvolveProblem:
    """An OpenEvolve-layout bundle as a :class:`~codevolve.core.problem.Problem`."""

    def __init__(self, bundle: Bundle) -> None:
        self._bundle = bundle
        self._config = read_config(bundle.config_text)
        functions = evaluator_functions(bundle.text(EVALUATOR), cascade=self._config.cascade)
        self._features = self._config.features(initial_length=len(bundle.initial_program))
        names = tuple(spec.name for spec in self._features)
        files = bundle.encoded()
        initial_tokens = code_tokens(bundle.initial_program) if DIVERSITY in names else ()
        thresholds = self._config.thresholds
        self._stages: tuple[Stage, ...] = tuple(
            EvaluatorStage(
                name=function.removeprefix("evaluate_") if len(functions) > 1 else function,
                function=function,
                # A threshold gates the next stage, so the last stage has none.
                threshold=Threshold(
                    absolute=thresholds[index], rejects=self._config.thresholds_reject
                )
                if index < len(thresholds) and index < len(functions) - 1
                else None,
                files=files,
                suffix=bundle.suffix,
                feature_names=names,
                initial_tokens=initial_tokens,
            )
            for index, function in enumerate(functions)
        )

    @property
    def bundle(self) -> Bundle:
        return self._bundle

    @property
    def config(self) -> BundleConfig:
        return self._config

    @property
    def name(self) -> str:
        return self._bundle.name

    @property
    def description(self) -> str:
        return self._config.system_message.strip() or DEFAULT_DESCRIPTION

    @property
    def initial_program(self) -> str:
        return self._bundle.initial_program

    @property
    def stages(self) -> Sequence[Stage]:
        return self._stages

    @property
    def features(self) -> Sequence[FeatureSpec]:
        return self._features

    def mutations(self) -> Sequence[Mutation]:
        return ()  # the generic mutations apply; a bundle brings no domain ones

    def prompt_notes(self, parent: ProgramView, inspirations: Sequence[ProgramView]) -> str:
        del parent, inspirations
        return ""  # the bundle's system message is all the context it brings

    def baselines(self) -> Sequence[Baseline]:
        return ()
