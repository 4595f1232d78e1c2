"""The evaluation cascade of gemm-tiling, cheap to expensive: static, probe, train.

The candidate only maps (M, N, K) to six integers inside the sandbox; every check and every timing
happens here, in trusted code, under the cost model.

1. ``static``: parse the source (never run it) and check every literal config; then call the
   candidate on the seen projections' grid shapes (each twice) plus unseen ones drawn fresh each
   evaluation, in a fresh order. Every answer must be a valid, launchable config, the same each
   time a shape is asked. Then, unless every answer the program can give is a literal just
   checked, the legality sweep (sweep.py): every M up to 16384 for every seen projection, and
   fresh (N, K) pairs. Score 1.0 on pass. The held-out families' projections are asked in the
   train stage only, where an error does not name the shape.
2. ``probe``: six train shapes (each regime, two Llama models); geomean speedup over the expert.
   A child must keep 90% of its parent's probe score: losing more than that on a spread of
   regimes rarely turns into a gain over all train shapes, and it saves the larger call.
3. ``train``: the train shapes and the validation shapes (the seen projections at token counts
   the grid lacks: shapes.validation_shapes), scored together and shown to proposers as
   per-shape cases. Both test splits (the held-out families' projections, and the seen
   projections at the grid M values train lacks) are scored in the same call but only reported
   as held-out metrics; ``heldout.score`` is the unseen projections' figure. The validation
   shapes are there because the train shapes leave parts of the shape space unreached: a rule
   that only held-out shapes take would never be judged. ``train_score`` (the train shapes
   alone) is what the run report calls the train figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from codevolve.core.problem import (
    LEGALITY,
    LEGALITY_INPUTS,
    LEGALITY_NOTE,
    PROVEN,
    TESTED,
    TRAIN_SCORE,
    Candidate,
    SandboxReply,
    Threshold,
)
from codevolve.core.program import CaseResult, StageResult
from codevolve.problems.gemm_tiling.baselines import (
    ShapeScore,
    geomean,
    geomean_over_oracle,
    geomean_speedup,
    score_configs,
)
from codevolve.problems.gemm_tiling.literal_answers import only_literal_answers
from codevolve.problems.gemm_tiling.shapes import GemmShape, Split, probe_shapes, tiling_split
from codevolve.problems.gemm_tiling.space import GemmConfig
from codevolve.problems.gemm_tiling.static_check import (
    ENTRY_POINT,
    check_source,
    impure_answers,
    judge_answer,
)
from codevolve.problems.gemm_tiling.sweep import (
    EDGE_PAIRS,
    fresh_pairs,
    odd_pairs,
    sweep_plan,
    sweep_problem,
)

DECODE_FEATURE_MAX_M = 64  # the decode_speedup feature covers train shapes with M <= 64
UNSEEN_PAIRS = 4  # fresh (N, K) pairs per evaluation, multiples of 128
UNSEEN_ODD_PAIRS = 4  # fresh (N, K) pairs per evaluation off the 128 grid, besides EDGE_PAIRS
# M asked of every pair off the 128 grid: 1, small primes, odd values beside powers of two, a
# round thousand, and a prime near the dense bound.
ODD_M = (1, 2, 3, 7, 13, 31, 127, 129, 1000, 4099, 16381)
UNSEEN_RANDOM_M = 16  # fresh random M per evaluation
MAX_UNSEEN_M = 16384
LARGE_POWERS_OF_TWO = tuple(2**e for e in range(7, 15))  # 128 .. 16384
PROBE_THRESHOLD = Threshold(relative=0.9)  # keep 90% of the parent's probe score
SWEEP_SEEDS = 1 << 62
PROOF = "every return is a literal config, each judged launchable by the static check"
NO_PROOF = "the program computes its answers: the legality sweep asked these inputs"


def _sandbox_error(stage: str, reply: SandboxReply) -> StageResult:
    kind = reply.error_kind.value if reply.error_kind is not None else "error"
    return StageResult(stage=stage, passed=False, score=None, error=f"{kind}: {reply.error}")


def ask_configs(
    stage: str,
    candidate: Candidate,
    shapes: Sequence[GemmShape],
    *,
    hidden: frozenset[GemmShape] = frozenset(),
) -> list[GemmConfig] | StageResult:
    """The candidate's launchable config for each shape, or the failed result saying why."""
    reply = candidate.call(ENTRY_POINT, [s.args for s in shapes])
    if not reply.ok:
        return _sandbox_error(stage, reply)
    configs = configs_or_error(shapes, reply, hidden=hidden)
    if isinstance(configs, str):
        return StageResult(stage=stage, passed=False, score=None, error=configs)
    return configs


def configs_or_error(
    shapes: Sequence[GemmShape], reply: SandboxReply, *, hidden: frozenset[GemmShape]
) -> list[GemmConfig] | str:
    """The candidate's answers as launchable configs, or why they are not.

    Errors on ``hidden`` shapes (the held-out split) do not name the shape.
    """
    values = reply.values or ()
    if len(values) != len(shapes):
        return f"{ENTRY_POINT} answered {len(values)} of {len(shapes)} calls"
    configs = []
    for shape, value in zip(shapes, values, strict=True):
        where = (
            "a held-out shape"
            if shape in hidden
            else f"{ENTRY_POINT}({shape.m}, {shape.n}, {shape.k})"
        )
        config = judge_answer(value)
        if isinstance(config, str):
            return f"{where} {config}"
        configs.append(config)
    return configs


def static_grid(rng: np.random.Generator, split: Split) -> tuple[GemmShape, ...]:
    """The seen projections' grid shapes and shapes off the grid (M 1..64, large powers of two,
    random M; seen and fresh (N, K) pairs, on the 128 grid and off it): about 1,400 calls,
    different each evaluation."""
    odd = [*EDGE_PAIRS, *odd_pairs(rng, UNSEEN_ODD_PAIRS)]
    seen = split.seen_grid
    pairs = [*split.seen_pairs, *fresh_pairs(rng, UNSEEN_PAIRS), *odd]

    def any_pair() -> tuple[int, int]:
        return pairs[int(rng.integers(len(pairs)))]

    unseen = [GemmShape(m, *any_pair()) for m in range(1, 65)]
    unseen += [GemmShape(m, n, k) for m in LARGE_POWERS_OF_TWO for n, k in pairs]
    unseen += [
        GemmShape(int(m), *any_pair())
        for m in rng.integers(65, MAX_UNSEEN_M + 1, size=UNSEEN_RANDOM_M)
    ]
    unseen += [GemmShape(m, n, k) for m in ODD_M for n, k in odd]
    known = {(s.m, s.n, s.k) for s in seen}
    fresh = sorted({s for s in unseen if (s.m, s.n, s.k) not in known})
    # The grid shapes twice, everything in a fresh order: a program whose answer depends on what
    # it was asked before (or on its position in the batch) is caught by impure_answers().
    grid = [*seen, *fresh, *seen]
    return tuple(grid[i] for i in rng.permutation(len(grid)))


@dataclass(frozen=True, slots=True)
class StaticStage:
    """Every literal config launchable, every answer on a wide grid valid and launchable, and
    (unless the program can only answer its literals) every answer of the legality sweep."""

    name: str = "static"
    threshold: Threshold | None = None
    split: Split = field(default_factory=tiling_split)

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        issues = check_source(candidate.source)
        if issues:
            shown = "; ".join(str(issue) for issue in issues[:3])
            more = f" (+{len(issues) - 3} more)" if len(issues) > 3 else ""
            return StageResult(
                stage=self.name, passed=False, score=None, error=f"static check: {shown}{more}"
            )
        shapes = static_grid(rng, self.split)
        configs = ask_configs(self.name, candidate, shapes)
        if isinstance(configs, StageResult):
            return configs
        impure = impure_answers(shapes, configs)
        if impure is not None:
            return StageResult(stage=self.name, passed=False, score=None, error=impure)
        seed = int(rng.integers(SWEEP_SEEDS))  # drawn on both paths: later draws stay the same
        swept = 0  # every answer is a literal the static check judged: nothing left to sweep
        legality = {LEGALITY: PROVEN, LEGALITY_NOTE: PROOF, LEGALITY_INPUTS: str(len(set(shapes)))}
        if not only_literal_answers(candidate.source):
            parts = sweep_plan(shapes, self.split.seen_pairs, np.random.default_rng(seed))
            asked = dict(zip(shapes, configs, strict=True))
            failure = sweep_problem(candidate, parts, seed=seed, asked=asked)
            if failure is not None:
                return StageResult(stage=self.name, passed=False, score=None, error=failure)
            swept = sum(pair.calls for part in parts for pair in part)  # every grid shape too
            legality = {LEGALITY: TESTED, LEGALITY_NOTE: NO_PROOF, LEGALITY_INPUTS: str(swept)}
        return StageResult(
            stage=self.name,
            passed=True,
            score=1.0,
            artifacts={"checked_shapes": str(len(shapes)), "swept_shapes": str(swept), **legality},
        )


@dataclass(frozen=True, slots=True)
class ProbeStage:
    """Geomean speedup over the expert on six train shapes."""

    name: str = "probe"
    threshold: Threshold | None = PROBE_THRESHOLD
    split: Split = field(default_factory=tiling_split)

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        del rng  # the probe shapes are fixed
        shapes = probe_shapes(self.split.train)
        configs = ask_configs(self.name, candidate, shapes)
        if isinstance(configs, StageResult):
            return configs
        speedup = geomean_speedup(score_configs(shapes, configs))
        return StageResult(
            stage=self.name, passed=True, score=speedup, metrics={"probe_speedup": speedup}
        )


@dataclass(frozen=True, slots=True)
class TrainStage:
    """Geomean speedup over the expert on the train and validation shapes; the test splits
    (unseen and seen projections) reported aside."""

    name: str = "train"
    threshold: Threshold | None = None
    split: Split = field(default_factory=tiling_split)

    def run(self, candidate: Candidate, rng: np.random.Generator) -> StageResult:
        del rng  # the splits are fixed
        split = self.split
        parts = (split.train, split.validation, split.unseen_test, split.seen_test)
        shapes = tuple(s for part in parts for s in part)
        hidden = frozenset(parts[2] + parts[3])
        configs = ask_configs(self.name, candidate, shapes, hidden=hidden)
        if isinstance(configs, StageResult):
            return configs
        scores = score_configs(shapes, configs)
        validation_from = len(parts[0])
        unseen_from = validation_from + len(parts[1])
        seen_from = unseen_from + len(parts[2])
        return _train_result(
            self.name,
            scores[:validation_from],
            scores[validation_from:unseen_from],
            test=(scores[unseen_from:seen_from], scores[seen_from:]),
        )


def _train_result(
    stage: str,
    train: list[ShapeScore],
    validation: list[ShapeScore],
    *,
    test: tuple[list[ShapeScore], list[ShapeScore]],
) -> StageResult:
    """``test``: the unseen projections' scores, then the seen projections' held-out ones."""
    selection = train + validation
    speedup = geomean_speedup(selection)
    by_regime = {
        regime: geomean_speedup(s for s in selection if s.shape.regime == regime)
        for regime in ("decode", "mid", "prefill")
    }
    metrics = {
        "speedup": speedup,
        TRAIN_SCORE: geomean_speedup(train),
        "validation_speedup": geomean_speedup(validation),
        "over_oracle": geomean_over_oracle(train),
        "validation_over_oracle": geomean_over_oracle(validation),
        **{f"speedup_{regime}": value for regime, value in by_regime.items()},
    }
    unseen, seen = test
    unseen_speedup = geomean_speedup(unseen)
    heldout = {
        "score": unseen_speedup,  # the held-out mirror of the score, read by the run report
        "unseen_speedup": unseen_speedup,
        "unseen_over_oracle": geomean_over_oracle(unseen),
    }
    if seen:  # gemm-tiling-gpu's split holds no seen projection out
        heldout |= {
            "seen_speedup": geomean_speedup(seen),
            "seen_over_oracle": geomean_over_oracle(seen),
        }
    features = {
        "distinct_configs": float(len({s.config for s in train})),
        "decode_speedup": geomean(s.speedup for s in train if s.shape.m <= DECODE_FEATURE_MAX_M),
    }
    cases = tuple(
        CaseResult(key=s.shape.key, cost=s.time_us, detail=str(s.config)) for s in selection
    )
    return StageResult(
        stage=stage,
        passed=True,
        score=speedup,
        metrics=metrics,
        heldout=heldout,
        features=features,
        cases=cases,
        feedback=_feedback(selection, speedup, by_regime),
    )


def _feedback(scored: list[ShapeScore], speedup: float, by_regime: dict[str, float]) -> str:
    """Short text for the proposer: the regimes, and the shapes losing most to the expert."""
    regimes = ", ".join(f"{regime} {value:.3f}x" for regime, value in by_regime.items())
    worst = sorted(scored, key=lambda s: s.speedup)[:3]
    shapes = "; ".join(
        f"{s.shape.key}: {s.config} {s.time_us:.1f} us ({s.speedup:.2f}x the expert)" for s in worst
    )
    return (
        f"Geomean speedup over the expert on {len(scored)} train and validation shapes: "
        f"{speedup:.3f}x "
        f"({regimes}; M <= 16 decode, 32-512 mid, >= 1024 prefill). "
        f"Slowest relative to the expert: {shapes}."
    )
