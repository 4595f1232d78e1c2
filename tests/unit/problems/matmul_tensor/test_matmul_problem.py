"""The matmul-tensor problem: registry, stages on the initial program and on bad programs,
scores, features, feedback, and the domain mutations through the real applier.

Stages run against an in-process fake of the sandboxed Candidate (tests only): it executes the
source here and passes answers through JSON, as the real sandbox does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from codevolve.core.diff import Applied
from codevolve.core.problem import JSONValue, SandboxErrorKind, SandboxReply
from codevolve.core.prompt import ProgramView, Prompt
from codevolve.problems.matmul_tensor.exact import Verdict
from codevolve.problems.matmul_tensor.mutations import (
    SCALES,
    library,
    matmul_mutations,
    read_source,
)
from codevolve.problems.matmul_tensor.problem import matmul_tensor_problem
from codevolve.problems.matmul_tensor.stages import TINY, SizeStage, Target, size_score
from codevolve.problems.matmul_tensor.tensor import Size
from codevolve.problems.registry import get_problem, problem_names
from codevolve.prompt_sampler.search_replace import apply_answer

PROBLEM = matmul_tensor_problem(budget_scale=0.2)
INITIAL = PROBLEM.initial_program
TINY_STAGE = PROBLEM.stages[0]


@dataclass(frozen=True)
class InProcessCandidate:
    """Runs the candidate in this process: for tests of trusted stages only."""

    source: str

    def call(self, entry: str, args: Sequence[Sequence[JSONValue]]) -> SandboxReply:
        namespace: dict[str, object] = {}
        started = time.perf_counter()
        try:
            exec(compile(self.source, "<candidate>", "exec"), namespace)
            function = namespace[entry]
            assert callable(function)
            values = tuple(json.loads(json.dumps(function(*a))) for a in args)
        except Exception as error:
            return SandboxReply(
                values=None, error_kind=SandboxErrorKind.EXCEPTION, error=repr(error)
            )
        return SandboxReply(values=values, duration_s=time.perf_counter() - started)


# Exact but naive: the schoolbook algorithm, whatever rank is asked.
NAIVE = """
def find_decomposition(n, m, p, rank, seed, time_budget_s):
    U = [[0] * (n * m * p) for _ in range(n * m)]
    V = [[0] * (n * m * p) for _ in range(m * p)]
    W = [[0] * (n * m * p) for _ in range(p * n)]
    r = 0
    for i in range(n):
        for j in range(m):
            for k in range(p):
                U[i * m + j][r] = V[j * p + k][r] = W[k * n + i][r] = 1
                r += 1
    return [U, V, W]
"""


def test_registry_builds_matmul_tensor_by_name() -> None:
    assert "matmul-tensor" in problem_names()
    problem = get_problem("matmul-tensor")
    assert problem.name == "matmul-tensor"
    assert [stage.name for stage in problem.stages] == ["tiny", "mid", "large"]
    assert "T[i*m + j, j*p + k, k*n + i] = 1" in problem.description
    assert {f.name for f in problem.features} == {"solved_sizes", "nonzero_share"}
    assert problem.baselines() == ()


def test_initial_program_passes_stage_zero_with_a_graded_score() -> None:
    result = TINY_STAGE.run(InProcessCandidate(INITIAL), np.random.default_rng(0))
    assert result.passed and result.error is None
    assert result.score is not None and 0.0 < result.score < 1.0  # inexact: graded, not zero
    assert result.metrics["residual_2x2x2"] > 0 and "rank_2x2x2" not in result.metrics
    assert "<2,2,2> asked rank 7" in result.feedback and "not exact" in result.feedback
    assert result.cases[0].key == "2x2x2"


def test_an_exact_naive_program_scores_one_per_size_and_stores_its_factors() -> None:
    candidate = InProcessCandidate(NAIVE)
    rng = np.random.default_rng(0)
    results = [stage.run(candidate, rng) for stage in PROBLEM.stages]
    assert all(r.passed for r in results)
    assert results[-1].score == pytest.approx(1.0)  # every size exact at the naive rank
    assert results[-1].metrics["solved_sizes"] == 8  # the ledger carried the earlier sizes
    assert results[-1].metrics["rank_4x4x4"] == 64
    stored = json.loads(results[1].artifacts["factors_3x3x3"])
    assert stored["rank"] == 27 and len(stored["U"]) == 9
    assert results[-1].features["solved_sizes"] == 8


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("def find_decomposition(n, m, p, rank, seed, t):\n    return [[[0.0]]]\n", "invalid"),
        (
            "def find_decomposition(n, m, p, rank, seed, t):\n    raise ValueError('x')\n",
            "exception",
        ),
        ("def find_decomposition(n, m, p, rank, seed, t):\n    return 'abc'\n", "invalid"),
        ("def other():\n    return 1\n", "exception"),
    ],
)
def test_known_bad_programs_fail_stage_zero(body: str, error: str) -> None:
    result = TINY_STAGE.run(InProcessCandidate(body), np.random.default_rng(0))
    assert not result.passed and result.score is None
    assert result.error is not None and error in result.error and "2x2x2" in result.error


def test_size_scores_are_one_at_naive_two_at_best_known_and_graded_below() -> None:
    size = Size(2, 2, 2)
    assert size_score(size, Verdict(True, 8, 0, 0.0)) == 1.0
    assert size_score(size, Verdict(True, 7, 0, 0.0)) == 2.0
    near, far = (size_score(size, Verdict(False, 7, w, float(w))) for w in (1, 40))
    assert 0 < far < near < 1.0


def test_stage_zero_rejects_a_timeout_as_a_failure() -> None:
    @dataclass(frozen=True)
    class TimedOut:
        source: str = ""

        def call(self, entry: str, args: Sequence[Sequence[JSONValue]]) -> SandboxReply:
            return SandboxReply(values=None, error_kind=SandboxErrorKind.TIMEOUT, error="wall")

    stage = SizeStage("tiny", (Target(Size(2, 2, 2), 7, 0.1),), first=True)
    result = stage.run(TimedOut(), np.random.default_rng(0))
    assert not result.passed and result.error == "2x2x2: timeout: wall"
    assert TINY[0].rank == 7


def _prompt(source: str, inspirations: tuple[str, ...] = ()) -> Prompt:
    return Prompt(
        job_id="job",
        problem="matmul-tensor",
        proposal_index=0,
        island=0,
        parent=ProgramView(id="p", source=source, score=0.1),
        inspirations=tuple(
            ProgramView(id=f"i{k}", source=s, score=0.1) for k, s in enumerate(inspirations)
        ),
        best_cases={},
        context="",
        text="",
    )


def _with(slot: str, variant: str) -> str:
    start = INITIAL.index(f"def {slot}(")
    end = INITIAL.index("\n\n\n", start)
    return INITIAL[:start] + library()[slot][variant] + INITIAL[end:]


def test_every_mutation_kind_yields_a_child_that_parses_and_stays_in_the_block() -> None:
    donor = _with("finish", "progressive")
    penalised = _with("optimise", "adam_penalty")  # has loss terms and a noise term to edit
    kinds = set()
    for mutation in matmul_mutations():
        kinds.add(mutation.kind)
        parent = penalised if mutation.kind in ("noise", "loss_term") else INITIAL
        if parent is penalised:  # the plain initial program has no such term
            assert mutation.propose(_prompt(INITIAL), np.random.default_rng(0)) is None
        for seed in range(5):
            answer = mutation.propose(_prompt(parent, (donor,)), np.random.default_rng(seed))
            assert answer is not None, mutation.kind
            outcome = apply_answer(parent, answer)
            assert isinstance(outcome, Applied), (mutation.kind, outcome)
            child = read_source(outcome.source)
            assert child is not None and outcome.source != parent
            assert set(child.functions) == {"optimise", "finish", "find_decomposition"}
    assert kinds == {
        "hyperparameter", "optimiser", "rounding", "loss_term", "noise", "borrow",
    }  # fmt: skip


def test_a_noise_edit_switches_the_term_on() -> None:
    penalised = _with("optimise", "adam_penalty")
    noise = next(m for m in matmul_mutations() if m.kind == "noise")
    answer = noise.propose(_prompt(penalised), np.random.default_rng(0))
    assert answer is not None
    outcome = apply_answer(penalised, answer)
    assert isinstance(outcome, Applied)
    assert "    NOISE = 0.0\n" in penalised and "    NOISE = 0.0\n" not in outcome.source


def test_library_variants_compose_into_programs_that_pass_stage_zero() -> None:
    for slot, variants in library().items():
        for name, text in variants.items():
            del text
            source = _with(slot, name)
            result = TINY_STAGE.run(InProcessCandidate(source), np.random.default_rng(1))
            assert result.passed, (slot, name, result.error)


def _namespace(source: str) -> dict[str, object]:
    namespace: dict[str, object] = {}
    exec(compile(source, "<candidate>", "exec"), namespace)
    return namespace


def test_initial_program_restarts_until_its_deadline() -> None:
    namespace = _namespace(INITIAL)
    plain = namespace["optimise"]
    assert callable(plain)
    calls = []

    def counted(*args: object) -> object:
        calls.append(time.monotonic())
        return plain(*args)

    namespace["optimise"] = counted
    namespace["STEPS"] = 50  # short starts: many of them fit in the budget
    search = namespace["find_decomposition"]
    assert callable(search)
    started = time.monotonic()
    factors = search(2, 2, 2, 7, 0, 0.5)
    elapsed = time.monotonic() - started
    assert len(calls) > 3  # not one start: fresh ones until the deadline
    assert 0.4 < elapsed < 0.8  # 0.85 of the budget, and at most one short start beyond it
    assert [np.array(x).shape for x in factors] == [(4, 7)] * 3


def test_initial_program_stops_restarting_at_an_exact_answer() -> None:
    naive_rank = 8  # the schoolbook algorithm: rank n*m*p is exact
    namespace = _namespace(INITIAL)
    namespace["optimise"] = lambda T, U, V, W, rng, deadline: _schoolbook_factors(2, 2, 2)
    calls = []
    plain_finish = namespace["finish"]
    assert callable(plain_finish)

    def counted(*args: object) -> object:
        calls.append(1)
        return plain_finish(*args)

    namespace["finish"] = counted
    search = namespace["find_decomposition"]
    assert callable(search)
    started = time.monotonic()
    search(2, 2, 2, naive_rank, 0, 5.0)
    assert len(calls) == 1 and time.monotonic() - started < 1.0


def _schoolbook_factors(n: int, m: int, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    U, V, W = (np.zeros((rows, n * m * p)) for rows in (n * m, m * p, p * n))
    r = 0
    for i in range(n):
        for j in range(m):
            for k in range(p):
                U[i * m + j, r] = V[j * p + k, r] = W[k * n + i, r] = 1
                r += 1
    return U, V, W


def test_two_hyperparameter_moves_never_lead_back_to_the_parent_value() -> None:
    sources = [INITIAL] + [_with(slot, name) for slot in library() for name in library()[slot]]
    for source in sources:
        parsed = read_source(source)
        assert parsed is not None
        for constant in parsed.constants:
            if constant.value == 0 or (constant.integral and constant.value < 20):
                continue  # off terms are switched on, not scaled; small counts may round back
            original = constant.render(constant.value)
            for a in SCALES:
                once = constant.value * a
                if constant.integral:
                    once = float(max(1, round(once)))
                for b in SCALES:
                    twice = constant.render(once * b)
                    assert twice != original, (constant.name, constant.value, a, b)


def test_batched_als_finds_an_exact_rank_7_decomposition_of_2x2x2() -> None:
    source = _with("optimise", "als_attract_batch")
    result = SizeStage("tiny", (Target(Size(2, 2, 2), 7, 3.0),), first=True).run(
        InProcessCandidate(source), np.random.default_rng(0)
    )
    assert result.passed and result.metrics["rank_2x2x2"] == 7, result.feedback
