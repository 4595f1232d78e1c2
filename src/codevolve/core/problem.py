"""The contract between problems, the cascade runner and the proposers.

A problem is trusted code. It owns an initial program, a cascade of stages, feature descriptors
and (optionally) domain mutations. A stage never runs the candidate in its own process: it asks the
:class:`Candidate` handle, which runs the candidate's entry point in a sandboxed child process and
returns plain data; the stage then judges that data.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeAlias

import numpy as np

from codevolve.core.diff import Diff, Hunk
from codevolve.core.program import Program, StageResult
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.core.pysource import check_parses, parse_python

# Metric of a problem that selects on more shapes or cases than its train split (validation
# shapes): its score on the train split alone, which the run report's train row shows.
TRAIN_SCORE = "train_score"

# Artifacts of a stage that checks that every answer of the program is legal (launchable, for
# gemm-tiling), read by the run report and `codevolve show`: LEGALITY is PROVEN when an argument
# covers every input, TESTED when only the inputs asked were checked; LEGALITY_INPUTS how many
# distinct inputs were asked (an int as text), LEGALITY_NOTE why it is or is not proven.
LEGALITY, LEGALITY_INPUTS, LEGALITY_NOTE = "legality", "legality_inputs", "legality_note"
PROVEN, TESTED = "proven", "tested"

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None


def legality_summary(program: Program) -> dict[str, Any] | None:
    """Whether every answer of the program was proven legal or tested on a number of inputs, as
    its evaluation recorded it; None for a problem (or a program) that records no such check."""
    verdict = program.artifacts.get(LEGALITY)
    inputs = program.artifacts.get(LEGALITY_INPUTS, "")
    if verdict is None or not inputs.isdigit():
        return None
    count, note = int(inputs), program.artifacts.get(LEGALITY_NOTE, "")
    proven = verdict == PROVEN
    text = (
        f"proven for every input ({note}); also tested on {count:,} inputs"
        if proven
        else f"tested on {count:,} inputs, not proven ({note})"
    )
    return {"proven": proven, "inputs": count, "note": note, "text": text}


class SandboxErrorKind(StrEnum):
    TIMEOUT = "timeout"  # wall or CPU limit
    MEMORY = "memory"  # address-space limit
    CRASH = "crash"  # killed by a signal or exited without a result
    EXCEPTION = "exception"  # the candidate raised
    INVALID_OUTPUT = "invalid_output"  # returned something that is not plain data
    LOAD_ERROR = "load_error"  # the source did not compile or lacks the entry point


@dataclass(frozen=True, slots=True)
class SandboxReply:
    """The result of calling a candidate's entry point on a batch of argument tuples."""

    values: tuple[JSONValue, ...] | None  # one per argument tuple; None on error
    error_kind: SandboxErrorKind | None = None
    error: str = ""  # a short message, with the traceback tail for exceptions
    stdout: str = ""  # capped
    stderr: str = ""  # capped
    duration_s: float = 0.0  # seconds, wall, as measured outside the child

    @property
    def ok(self) -> bool:
        return self.error_kind is None


class Candidate(Protocol):
    """A program under evaluation, as a stage sees it."""

    @property
    def source(self) -> str: ...

    def call(self, entry: str, args: Sequence[Sequence[JSONValue]]) -> SandboxReply:
        """Run ``entry(*a)`` for each ``a`` in ``args`` in one fresh sandboxed child."""
        ...

    def call_harness(
        self, harness: str, entry: str, args: Sequence[Sequence[JSONValue]]
    ) -> SandboxReply:
        """Like :meth:`call`, but load ``harness`` instead of the candidate, under the same limits.

        For judges that must share the candidate's process (an OpenEvolve ``evaluator.py`` imports
        the program it scores): the harness gets the source as data and runs it in the sandbox.
        """
        ...


@dataclass(frozen=True, slots=True)
class Threshold:
    """When a stage lets a program through: score >= absolute and >= relative * parent's score.

    The parent-relative part is skipped when the parent has no score for the stage. Below it,
    ``rejects`` decides what becomes of the program: True (a gate) rejects it, so that it never
    enters the archive; False (OpenEvolve's cascade) only stops the cascade there, and the
    program is kept, evaluated, with the stages it ran and the last one's score.
    """

    absolute: float | None = None
    relative: float | None = None
    rejects: bool = True

    def passes(self, score: float | None, parent_score: float | None) -> bool:
        if score is None:
            return False
        if self.absolute is not None and score < self.absolute:
            return False
        return not (
            self.relative is not None
            and parent_score is not None
            and score < self.relative * parent_score
        )


class Stage(Protocol):
    """One step of a cascade, cheap ones first."""

    @property
    def name(self) -> str: ...

    @property
    def threshold(self) -> Threshold | None: ...

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        """Judge the candidate. Errors of the candidate are a failed result, never an exception."""
        ...


@dataclass(frozen=True, slots=True)
class SourceCheckStage:
    """A stage that reads the candidate's source and never runs it: passed (score 1) when
    ``check`` finds nothing to refuse, else failed with the reason it gives."""

    check: Callable[[str], str]  # source -> why it is refused, "" when it passes
    name: str = "static"
    threshold: Threshold | None = None

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        del rng
        refused = self.check(candidate.source)
        if refused:
            return StageResult(stage=self.name, passed=False, score=None, error=refused)
        return StageResult(stage=self.name, passed=True, score=1.0)


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """One MAP-Elites descriptor: values in [low, high] are cut into ``bins`` equal bins."""

    name: str
    low: float
    high: float
    bins: int


@dataclass(frozen=True, slots=True)
class Baseline:
    """A reference score of the problem on the selection split and on the held-out split."""

    name: str
    train: float
    test: float | None = None


class Mutation(Protocol):
    """A domain mutation for the simulated proposer: emits SEARCH/REPLACE text or None."""

    @property
    def kind(self) -> str: ...

    def propose(self, prompt: Prompt, rng: np.random.Generator) -> str | None: ...


# (parent source, its tree, prompt, rng) -> the hunks of one edit, or None where it does not apply
TreeEdit = Callable[[str, ast.Module, Prompt, np.random.Generator], Sequence[Hunk] | None]


def _any_source(source: str) -> bool:
    del source
    return True


@dataclass(frozen=True, slots=True)
class TreeMutation:
    """A domain mutation that reads the parent with ``ast`` and answers ``edit``'s hunks as one
    diff; None when the parent does not parse or fails ``applies``, when the edit gives no hunk,
    or (``check_child``) when the child would not parse."""

    kind: str
    edit: TreeEdit
    weight: float = 1.0  # relative chance of being tried first (see the simulated proposer)
    applies: Callable[[str], bool] = _any_source  # a check of the parent's source, before the edit
    check_child: bool = False

    def propose(self, prompt: Prompt, rng: np.random.Generator) -> str | None:
        source = prompt.parent.source
        try:
            tree = parse_python(source)
        except (SyntaxError, ValueError):
            return None
        if not self.applies(source):
            return None
        hunks = self.edit(source, tree, prompt, rng)
        if not hunks:
            return None
        if self.check_child:
            child = source
            for hunk in hunks:
                child = child.replace(hunk.search, hunk.replace, 1)
            try:
                check_parses(child)
            except (SyntaxError, ValueError):
                return None
        return Diff(tuple(hunks)).render()


class Problem(Protocol):
    """An evaluation target (:class:`ProblemSpec` is one as a frozen value)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str:
        """The task, the metric and the rules, as the proposer should read them."""
        ...

    @property
    def initial_program(self) -> str: ...

    @property
    def stages(self) -> Sequence[Stage]: ...

    @property
    def features(self) -> Sequence[FeatureSpec]: ...

    def mutations(self) -> Sequence[Mutation]:
        """Domain mutations; may be empty."""
        ...

    def baselines(self) -> Sequence[Baseline]:
        """Reference scores for the final report; may be empty."""
        ...

    def prompt_notes(self, parent: ProgramView, inspirations: Sequence[ProgramView]) -> str:
        """What the problem adds to the prompt for this parent and these inspirations (a table
        read from their measurements); "" for none."""
        ...


def _no_mutations() -> Sequence[Mutation]:
    return ()


def _no_baselines() -> Sequence[Baseline]:
    return ()


def _no_notes(parent: ProgramView, inspirations: Sequence[ProgramView]) -> str:
    del parent, inspirations
    return ""


@dataclass(frozen=True, slots=True)
class ProblemSpec:
    """A problem as one frozen value, with the shape of :class:`Problem`: the parts every
    built-in problem names. ``domain_mutations`` and ``reference_baselines`` are called when a
    run asks for them (they may import a module or compute tables); ``notes`` when a prompt is
    rendered."""

    name: str
    description: str
    initial_program: str
    stages: tuple[Stage, ...]
    features: tuple[FeatureSpec, ...]
    domain_mutations: Callable[[], Sequence[Mutation]] = _no_mutations
    reference_baselines: Callable[[], Sequence[Baseline]] = _no_baselines
    notes: Callable[[ProgramView, Sequence[ProgramView]], str] = _no_notes

    def mutations(self) -> Sequence[Mutation]:
        return self.domain_mutations()

    def baselines(self) -> Sequence[Baseline]:
        return self.reference_baselines()

    def prompt_notes(self, parent: ProgramView, inspirations: Sequence[ProgramView]) -> str:
        return self.notes(parent, inspirations)
