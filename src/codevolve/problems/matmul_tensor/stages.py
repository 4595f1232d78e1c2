"""The evaluation cascade of matmul-tensor: <2,2,2>, then the mid sizes, then <4,4,4>.

The candidate's ``find_decomposition`` runs in the sandbox, one fresh child per size, with a time
budget it is told about and a sandbox limit above it. Its numbers come back as plain lists; this
trusted code snaps them to the problem's ring, verifies them exactly (exact.py) and scores them.

Score of one size (higher is better):

- an exact decomposition with r nonzero terms: ``1 + (naive - r) / (naive - best_known)``, i.e. 1
  at the naive rank n*m*p and 2 at the best published rank (more below it);
- otherwise a graded ``0.99 * nnz(T) / (nnz(T) + residual)``, residual being the L1 distance of
  the rounded reconstruction from T: a search that gets closer earns more, which gives the
  evolution a slope before it finds anything exact.

Each stage's score is the mean over every size judged so far in this evaluation (earlier stages
included), so the last stage's score is the mean over all eight sizes.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from codevolve.core.problem import Candidate, JSONValue, SandboxReply, Threshold
from codevolve.core.program import CaseResult, StageResult
from codevolve.problems.matmul_tensor.exact import Factors, Ring, SnapError, Verdict, snap, verify
from codevolve.problems.matmul_tensor.tensor import BEST_KNOWN_RANK, Size, matmul_tensor

ENTRY_POINT = "find_decomposition"
INEXACT_CAP = 0.99  # an inexact answer never reaches the score of the naive exact one
MAX_SEED = 2**31 - 1
TINY_THRESHOLD = Threshold(relative=0.9)  # a child must keep 90% of its parent's <2,2,2> score


@dataclass(frozen=True, slots=True)
class Target:
    """One size to decompose: the rank asked for and the search's time budget (seconds)."""

    size: Size
    rank: int
    budget_s: float


def _target(n: int, m: int, p: int, budget_s: float) -> Target:
    size = Size(n, m, p)
    return Target(size, BEST_KNOWN_RANK[size], budget_s)


TINY = (_target(2, 2, 2, 3.0),)
MID = (
    _target(2, 2, 3, 2.5),
    _target(2, 2, 4, 2.5),
    _target(2, 3, 3, 2.5),
    _target(2, 3, 4, 2.5),
    _target(3, 3, 3, 8.0),
    _target(3, 3, 4, 2.5),
)
LARGE = (_target(4, 4, 4, 8.0),)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one size's call produced, judged."""

    target: Target
    score: float
    verdict: Verdict | None = None
    factors: Factors | None = None
    error: str = ""

    @property
    def exact(self) -> bool:
        return self.verdict is not None and self.verdict.exact


def size_score(size: Size, verdict: Verdict) -> float:
    """1 at the naive rank, 2 at the best known rank; graded below 1 when not exact."""
    if verdict.exact:
        gap = size.naive_rank - BEST_KNOWN_RANK[size]
        return 1.0 + (size.naive_rank - verdict.rank) / gap
    ones = int(matmul_tensor(size).sum())
    return INEXACT_CAP * ones / (ones + verdict.residual)


def judge(target: Target, value: JSONValue, ring: Ring) -> Outcome:
    """Snap and verify one answer of the candidate."""
    try:
        factors = snap(value, target.size, ring, max_rank=target.size.naive_rank * 2)
    except SnapError as exc:
        return Outcome(target, 0.0, error=f"invalid answer: {exc}")
    verdict = verify(target.size, factors, ring=ring)
    return Outcome(target, size_score(target.size, verdict), verdict, factors)


def _reply_error(reply: SandboxReply) -> str:
    kind = reply.error_kind.value if reply.error_kind is not None else "error"
    return f"{kind}: {reply.error}"


@dataclass(slots=True)
class _Ledger:
    """Outcomes of the sizes judged so far for one candidate, across the stages of a cascade."""

    outcomes: list[Outcome] = field(default_factory=list)


# Keyed weakly by the candidate handle: the cascade passes the same handle to every stage of one
# evaluation, and the entry dies with it. Stages only receive (candidate, rng), so this is how the
# last stage knows the earlier sizes' results.
_LEDGERS: weakref.WeakKeyDictionary[Candidate, _Ledger] = weakref.WeakKeyDictionary()


def _ledger(candidate: Candidate, *, first: bool) -> _Ledger:
    try:
        if first or candidate not in _LEDGERS:
            _LEDGERS[candidate] = _Ledger()
        return _LEDGERS[candidate]
    except TypeError:  # a handle that cannot be weakly referenced: judge this stage alone
        return _Ledger()


@dataclass(frozen=True, slots=True)
class SizeStage:
    """Asks the candidate for a decomposition of each target size and verifies each exactly."""

    name: str
    targets: tuple[Target, ...]
    first: bool = False  # the cascade's first stage starts a fresh ledger
    threshold: Threshold | None = None
    ring: Ring = Ring.INTEGERS

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        ledger = _ledger(candidate, first=self.first)
        for target in self.targets:
            seed = int(rng.integers(MAX_SEED))
            args: list[JSONValue] = [
                target.size.n,
                target.size.m,
                target.size.p,
                target.rank,
                seed,
                target.budget_s,
            ]
            reply = candidate.call(ENTRY_POINT, [args])
            if not reply.ok or not reply.values:
                error = f"{target.size.key}: {_reply_error(reply)}"
                return StageResult(stage=self.name, passed=False, score=None, error=error)
            outcome = judge(target, reply.values[0], self.ring)
            if outcome.error:
                error = f"{target.size.key}: {outcome.error}"
                return StageResult(stage=self.name, passed=False, score=None, error=error)
            ledger.outcomes.append(outcome)
        return stage_result(self.name, ledger.outcomes)


def stage_result(name: str, outcomes: Sequence[Outcome]) -> StageResult:
    """Score, metrics, features, cases, feedback and exact factors of the sizes so far."""
    score = float(np.mean([o.score for o in outcomes]))
    metrics: dict[str, float] = {"solved_sizes": float(sum(o.exact for o in outcomes))}
    artifacts: dict[str, str] = {}
    cases = []
    for outcome in outcomes:
        key, verdict = outcome.target.size.key, outcome.verdict
        assert verdict is not None  # outcomes with errors never reach the ledger
        metrics[f"score_{key}"] = outcome.score
        metrics[f"residual_{key}"] = verdict.residual  # lower is better
        if outcome.exact and outcome.factors is not None:
            metrics[f"rank_{key}"] = float(verdict.rank)  # lower is better
            artifacts[f"factors_{key}"] = json.dumps(
                {
                    "size": [outcome.target.size.n, outcome.target.size.m, outcome.target.size.p],
                    "rank": verdict.rank,
                    "U": outcome.factors[0].to_json(),
                    "V": outcome.factors[1].to_json(),
                    "W": outcome.factors[2].to_json(),
                }
            )
        # Lower is better: any exact rank beats any inexact answer.
        cost = (
            float(verdict.rank)
            if outcome.exact
            else outcome.target.size.naive_rank + verdict.residual
        )
        cases.append(CaseResult(key=key, cost=cost, detail=_detail(outcome)))
    return StageResult(
        stage=name,
        passed=True,
        score=score,
        metrics=metrics,
        features=_features(outcomes),
        cases=tuple(cases),
        feedback=_feedback(outcomes, score),
        artifacts=artifacts,
    )


def _features(outcomes: Sequence[Outcome]) -> dict[str, float]:
    """Sizes solved exactly, and the share of nonzero coefficients in the largest size's answer."""
    largest = max(outcomes, key=lambda o: o.target.size.naive_rank)
    density = 0.0
    if largest.factors is not None:
        entries = sum(f.re.size for f in largest.factors)
        nonzero = sum(int(np.count_nonzero(f.re)) for f in largest.factors)
        density = nonzero / max(entries, 1)
    return {"solved_sizes": float(sum(o.exact for o in outcomes)), "nonzero_share": density}


def _detail(outcome: Outcome) -> str:
    verdict = outcome.verdict
    assert verdict is not None
    if outcome.exact:
        return f"exact, rank {verdict.rank}"
    return f"not exact: {verdict.wrong_entries} entries wrong, residual {verdict.residual:g}"


def _feedback(outcomes: Sequence[Outcome], score: float) -> str:
    lines = [f"Mean size score {score:.3f} (1 = naive rank exact, 2 = best known rank exact)."]
    for outcome in outcomes:
        size, verdict = outcome.target.size, outcome.verdict
        assert verdict is not None
        head = (
            f"<{size.n},{size.m},{size.p}> asked rank {outcome.target.rank} "
            f"(naive {size.naive_rank}, best known {BEST_KNOWN_RANK[size]}, "
            f"budget {outcome.target.budget_s:g} s): "
        )
        if outcome.exact:
            lines.append(head + f"exact with {verdict.rank} nonzero terms.")
        else:
            lines.append(
                head + f"not exact after rounding, {verdict.wrong_entries} tensor entries wrong, "
                f"L1 residual {verdict.residual:g}."
            )
    return "\n".join(lines)
