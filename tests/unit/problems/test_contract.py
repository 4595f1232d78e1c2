"""The contract every registered problem keeps, checked on each one without a GPU.

Parametrised over the registry (entry points), so a problem installed from another package is
held to it as the ones that ship are: its plug-in names its problem; the initial program passes
the stages a CPU worker runs, in the real sandbox; the judges' figures are finite, and the same
for the same seed and the same answers of the candidate (a candidate may use its wall time, as
matmul-tensor's search does, so its answers are recorded once and replayed); features lie in
their declared ranges; and every diff the simulated proposer writes for the initial program
applies. A problem whose first stage needs a device is checked as far as a CPU goes.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from codevolve.core.config import SandboxLimits
from codevolve.core.device import CPU, capability_of
from codevolve.core.diff import Applied
from codevolve.core.plugin import ProblemPlugin
from codevolve.core.problem import JSONValue, Problem, SandboxReply
from codevolve.core.program import StageResult
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.evaluator_workers.cascade import SandboxedCandidate
from codevolve.evaluator_workers.sandbox import SandboxPool
from codevolve.problems import registry
from codevolve.prompt_sampler.search_replace import apply_answer
from codevolve.proposers.simulated import SimulatedProposer

SEED = 7
PROPOSALS = 24  # proposals of the simulated proposer checked per problem
LIMITS = SandboxLimits(wall_s=60.0, cpu_s=60.0, memory_mb=2048)

NAMES = registry.problem_names()


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(size=1) as sandbox:
        yield sandbox


@dataclass
class Recorder:
    """A candidate that records what the sandbox answered, to be replayed by :class:`Replay`."""

    inner: SandboxedCandidate
    calls: list[tuple[str, list[list[JSONValue]], SandboxReply]] = field(default_factory=list)

    @property
    def source(self) -> str:
        return self.inner.source

    def call(self, entry: str, args: Sequence[Sequence[JSONValue]]) -> SandboxReply:
        reply = self.inner.call(entry, args)
        self.calls.append((entry, [list(a) for a in args], reply))
        return reply

    def call_harness(
        self, harness: str, entry: str, args: Sequence[Sequence[JSONValue]]
    ) -> SandboxReply:
        reply = self.inner.call_harness(harness, entry, args)
        self.calls.append((entry, [list(a) for a in args], reply))
        return reply


@dataclass
class Replay:
    """The recorded answers, in order; the stages must ask the very same calls again."""

    source: str
    calls: list[tuple[str, list[list[JSONValue]], SandboxReply]]

    def call(self, entry: str, args: Sequence[Sequence[JSONValue]]) -> SandboxReply:
        asked, asked_args, reply = self.calls.pop(0)
        assert (entry, [list(a) for a in args]) == (asked, asked_args), "other inputs this time"
        return reply

    def call_harness(
        self, harness: str, entry: str, args: Sequence[Sequence[JSONValue]]
    ) -> SandboxReply:
        return self.call(entry, args)


def _cpu_stages(problem: Problem) -> list[object]:
    """The stages a CPU worker runs, up to the first that needs a device."""
    stages = []
    for stage in problem.stages:
        if capability_of(stage) != CPU:
            break
        stages.append(stage)
    return stages


def _run(problem: Problem, candidate: object) -> list[StageResult]:
    rng = np.random.default_rng(SEED)
    return [stage.run(candidate, rng) for stage in _cpu_stages(problem)]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Judged:
    problem: Problem
    results: list[StageResult]
    calls: list[tuple[str, list[list[JSONValue]], SandboxReply]]


_judged: dict[str, Judged] = {}


def _judged_once(name: str, pool: SandboxPool) -> Judged:
    """The initial program through the problem's CPU stages, once per problem and session."""
    if name not in _judged:
        problem = registry.get_problem(name)
        if not _cpu_stages(problem):
            pytest.skip(f"{name}: its first stage needs a device; no stage runs on a CPU")
        candidate = Recorder(SandboxedCandidate(problem.initial_program, limits=LIMITS, pool=pool))
        _judged[name] = Judged(problem, _run(problem, candidate), candidate.calls)
    return _judged[name]


@pytest.mark.parametrize("name", NAMES)
def test_the_plugin_builds_the_problem_it_names(name: str) -> None:
    plugin = registry.plugins()[name]
    assert isinstance(plugin, ProblemPlugin) and plugin.problem is not None
    problem = plugin.problem()
    assert problem.name == name
    assert problem.initial_program.strip() and problem.description.strip()
    assert problem.stages, f"{name} has no stage"
    assert len({s.name for s in problem.stages}) == len(problem.stages), "stage names repeat"


@pytest.mark.parametrize("name", NAMES)
def test_the_prompt_notes_on_an_unmeasured_program_are_text(name: str) -> None:
    problem = registry.get_problem(name)
    parent = ProgramView(id="p", source=problem.initial_program, score=None)
    notes = problem.prompt_notes(parent, [parent])
    assert isinstance(notes, str) and "Traceback" not in notes


@pytest.mark.parametrize("name", NAMES)
def test_the_features_are_well_formed(name: str) -> None:
    features = registry.get_problem(name).features
    assert len({f.name for f in features}) == len(features)
    for feature in features:
        assert math.isfinite(feature.low) and math.isfinite(feature.high)
        assert feature.low < feature.high and feature.bins >= 1, feature


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_initial_program_passes_the_cpu_stages(name: str, pool: SandboxPool) -> None:
    judged = _judged_once(name, pool)
    for result in judged.results:
        assert result.passed, f"{name}, stage {result.stage}: {result.error}"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_figures_are_finite_and_the_same_for_the_same_seed(name: str, pool: SandboxPool) -> None:
    judged = _judged_once(name, pool)
    replay = Replay(judged.problem.initial_program, [*judged.calls])
    again = _run(registry.get_problem(name), replay)
    for first, second in zip(judged.results, again, strict=True):
        figures = [first.score, *first.metrics.values(), *first.features.values()]
        assert all(v is None or math.isfinite(v) for v in figures), (name, first)
        assert (second.score, second.metrics, second.features) == (
            first.score,
            first.metrics,
            first.features,
        ), f"{name}, stage {first.stage}: another figure for the same seed and answers"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_features_fall_in_their_declared_range(name: str, pool: SandboxPool) -> None:
    judged = _judged_once(name, pool)
    declared = {f.name: f for f in judged.problem.features}
    for result in judged.results:
        for feature, value in result.features.items():
            if feature in declared:
                spec = declared[feature]
                assert spec.low <= value <= spec.high, (name, result.stage, feature, value)


@pytest.mark.parametrize("name", NAMES)
def test_the_simulated_proposers_diffs_apply(name: str) -> None:
    problem = registry.get_problem(name)
    parent = ProgramView(id="initial", source=problem.initial_program, score=1.0)
    failures, children = [], 0
    for domain_weight in (1.0, 0.0):  # the problem's own mutations, then the generic ones
        proposer = SimulatedProposer(problem.mutations(), domain_weight=domain_weight)
        for index in range(PROPOSALS // 2):
            prompt = Prompt(
                job_id="contract",
                problem=name,
                proposal_index=index,
                island=0,
                parent=parent,
                inspirations=(),
                best_cases={},
                context=problem.description,
                text="",
            )
            rng = np.random.default_rng([SEED, index])
            proposal = asyncio.run(proposer.propose(prompt, rng))
            if proposal.error is not None:
                continue  # no mutation applies to this parent: a recorded outcome, not a diff
            applied = apply_answer(parent.source, proposal.text)
            if not isinstance(applied, Applied):
                failures.append(f"{proposal.proposer}: {applied}")
            children += 1
    assert not failures, failures
    assert children >= PROPOSALS // 2, f"{name}: only {children} of {PROPOSALS} proposals"


def test_a_replay_refuses_a_stage_that_asks_other_inputs() -> None:
    recorded = [("f", [[1]], SandboxReply(values=(2,)))]
    replay = Replay("def f(x):\n    return 2 * x\n", recorded)
    with pytest.raises(AssertionError, match="other inputs"):
        replay.call("f", [[3]])
