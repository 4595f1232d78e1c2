"""The legality sweep: every token count up to a bound, for every seen projection, in the sandbox.

The static stage's grid asks about 1,400 shapes, so a config computed on a rare branch (taken
only when ``M % 1000 == 999``, say) passes it, and fails at launch time in production. The sweep
asks ``choose_config`` about every M in 1..:data:`DENSE_MAX_M` for each seen projection's (N, K)
(shapes.seen_projections: the held-out families' are asked only where errors name no shape),
every token count the problem serves (the grid reaches 8192; prefill chunks of 16384 tokens are
common), plus seeded larger M up to :data:`LARGE_MAX_M`; fresh (N, K) pairs on the 128 grid (the
grid's and :data:`FRESH_PAIRS` more) at every M up to :data:`FRESH_DENSE_MAX_M`, seeded M up to
the bound and above it, and the M the grid asked of them; and pairs off the 128 grid, which no
projection has (:data:`EDGE_PAIRS`: 1, small and large primes, odd sizes either side of a multiple
of 128, up to N = 262144 and K = 65536; the grid's drawn ones and :data:`ODD_PAIRS` more), at every
M up to :data:`ODD_DENSE_MAX_M` and seeded M above: about 600,000 shapes. Every answer must be
six ints from the value sets and launchable; the first that is not fails the program with its
input named. What no finite sweep covers: M above the bound beyond the seeded samples, and (N, K)
pairs other than the projections' and the drawn ones.

The calls are batched into one sandboxed child per projection, one for the fresh pairs on the
128 grid and one for those off it (each about 11,000-22,000 calls, so each child's CPU limit is
spent on one part only). A child runs ``_sweep_harness.py``, which keeps the answers and sends
back only where they change (per (N, K), the M of each change and the config from there on):
the per-answer JSON of ~600,000 calls would cost several times the calls. Every distinct config
is judged here.

The sweep asks each shape once, in a scrambled order. Its answers on the shapes the grid also
asked (the seen grid shapes among them) must equal the grid's, which came from another process,
another order and a batch of another size: a program whose answer depends on what it was asked
before, or how often, fails as impure.

Programs whose every answer is a literal that the static check judged
(:func:`~codevolve.problems.gemm_tiling.literal_answers.only_literal_answers`) skip the sweep.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np

from codevolve.core.problem import Candidate, JSONValue
from codevolve.problems.gemm_tiling.shapes import GemmShape
from codevolve.problems.gemm_tiling.space import GemmConfig
from codevolve.problems.gemm_tiling.static_check import ENTRY_POINT, impurity, judge_answer

HARNESS_FILE = "_sweep_harness.py"
HARNESS_ENTRY = "sweep"
DENSE_MAX_M = 16384  # every M in 1..DENSE_MAX_M, for every seen projection
LARGE_MAX_M = 65536  # seeded M in (DENSE_MAX_M, LARGE_MAX_M], for every pair
LARGE_M_PER_PAIR = 16
FRESH_PAIRS = 12  # fresh (N, K) pairs drawn for the sweep, besides the grid's
FRESH_DENSE_MAX_M = 1024  # every M in 1..FRESH_DENSE_MAX_M, for every fresh pair
FRESH_RANDOM_M = 256  # seeded M in (FRESH_DENSE_MAX_M, DENSE_MAX_M], per fresh pair
FRESH_N_STEPS, FRESH_K_STEPS = 256, 128  # fresh N, K: multiples of 128 up to 32768 and 16384
# Pairs off the 128 grid, which no projection has: N up to a vocabulary projection's width (an
# LM head of a 256k vocabulary), K up to a long reduction. Values of 1 and primes are legal shapes.
MAX_ODD_N, MAX_ODD_K = 262144, 65536
# Asked at every evaluation: the smallest, small primes, odd values either side of a multiple of
# 128, round thousands (a classifier head of 1000 classes), GPT-2's LM head (N = 50257 = 29 *
# 1733), large primes (65521, 2**13 - 1, 2**17 - 1), the bounds themselves.
EDGE_PAIRS = (
    (1, 1),
    (7, 13),
    (127, 4095),
    (4097, 129),
    (1000, 1000),
    (50257, 768),
    (65521, 8191),
    (131071, 65521),
    (MAX_ODD_N, MAX_ODD_K),
)
ODD_PAIRS = 8  # drawn off the 128 grid for the sweep, besides the grid's
ODD_DENSE_MAX_M = 512  # every M in 1..ODD_DENSE_MAX_M, for every pair off the grid
ODD_RANDOM_M = 64  # seeded M in (ODD_DENSE_MAX_M, DENSE_MAX_M], per pair off the grid
HARNESS_SEEDS = 1 << 31


@dataclass(frozen=True, slots=True)
class SweptPair:
    """One (N, K) of the sweep and the M values asked of it."""

    n: int
    k: int
    dense_to: int  # every M in 1..dense_to
    extra: tuple[int, ...]  # and these, ascending, each above dense_to

    @property
    def calls(self) -> int:
        return self.dense_to + len(self.extra)

    def asks(self, m: int) -> bool:
        if 1 <= m <= self.dense_to:
            return True
        at = bisect.bisect_left(self.extra, m)
        return at < len(self.extra) and self.extra[at] == m

    def request(self) -> list[JSONValue]:
        return [self.n, self.k, self.dense_to, list(self.extra)]


Part = tuple[SweptPair, ...]  # the pairs one sandboxed child sweeps


def fresh_pairs(rng: np.random.Generator, count: int) -> list[tuple[int, int]]:
    """``count`` (N, K) pairs, multiples of 128 (N up to 32768, K up to 16384)."""
    return [
        (
            128 * int(rng.integers(1, FRESH_N_STEPS + 1)),
            128 * int(rng.integers(1, FRESH_K_STEPS + 1)),
        )
        for _ in range(count)
    ]


def odd_pairs(rng: np.random.Generator, count: int) -> list[tuple[int, int]]:
    """``count`` (N, K) pairs, neither a multiple of 128, log-uniform in 1..MAX_ODD_N and
    1..MAX_ODD_K: as many below 128 as between 8192 and 16384."""

    def draw(bound: int) -> int:
        value = int(np.exp2(rng.uniform(0.0, np.log2(bound))))
        return value + 1 if value % 128 == 0 else value

    return [(draw(MAX_ODD_N), draw(MAX_ODD_K)) for _ in range(count)]


def on_the_grid(pair: tuple[int, int]) -> bool:
    """Whether both of a pair's sizes are multiples of 128, as every projection's are."""
    return pair[0] % 128 == 0 and pair[1] % 128 == 0


def sweep_plan(
    grid: Sequence[GemmShape], projections: Sequence[tuple[int, int]], rng: np.random.Generator
) -> tuple[Part, ...]:
    """One part per projection's (N, K), one for the fresh pairs on the 128 grid (the grid's and
    FRESH_PAIRS more) and one for the pairs off it (the grid's and ODD_PAIRS more)."""
    grid_ms: dict[tuple[int, int], list[int]] = {}
    for shape in grid:
        grid_ms.setdefault((shape.n, shape.k), []).append(shape.m)

    def larger() -> list[int]:
        return [int(m) for m in rng.integers(DENSE_MAX_M + 1, LARGE_MAX_M + 1, LARGE_M_PER_PAIR)]

    parts: list[Part] = [
        (SweptPair(n, k, DENSE_MAX_M, _above(DENSE_MAX_M, larger() + grid_ms.get((n, k), []))),)
        for n, k in projections
    ]
    unseen = sorted(set(grid_ms) - set(projections))
    fresh = [pair for pair in unseen if on_the_grid(pair)]
    fresh += [pair for pair in fresh_pairs(rng, FRESH_PAIRS) if pair not in grid_ms]
    odd = [pair for pair in unseen if not on_the_grid(pair)]
    odd += [pair for pair in odd_pairs(rng, ODD_PAIRS) if pair not in grid_ms]
    for pairs, dense_to, sampled in (
        (fresh, FRESH_DENSE_MAX_M, FRESH_RANDOM_M),
        (odd, ODD_DENSE_MAX_M, ODD_RANDOM_M),
    ):
        ms = {
            pair: [int(m) for m in rng.integers(dense_to + 1, DENSE_MAX_M + 1, sampled)] + larger()
            for pair in dict.fromkeys(pairs)
        }
        parts.append(
            tuple(
                SweptPair(n, k, dense_to, _above(dense_to, asked + grid_ms.get((n, k), [])))
                for (n, k), asked in ms.items()
            )
        )
    return tuple(parts)


def _above(bound: int, ms: list[int]) -> tuple[int, ...]:
    return tuple(sorted({m for m in ms if m > bound}))


@functools.cache
def harness_source() -> str:
    """The text of ``_sweep_harness.py``: sent to the sandbox, never imported here."""
    package = resources.files("codevolve.problems.gemm_tiling")
    return package.joinpath(HARNESS_FILE).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class _Runs:
    """One pair's answers: the config from each start M on, up to the next start."""

    starts: list[int]
    configs: list[GemmConfig]

    def at(self, m: int) -> GemmConfig:
        return self.configs[bisect.bisect_right(self.starts, m) - 1]


def sweep_problem(
    candidate: Candidate,
    parts: Sequence[Part],
    *,
    seed: int,
    asked: Mapping[GemmShape, GemmConfig],
) -> str | None:
    """Why the candidate fails the sweep, with the input named; None when every answer is a
    launchable config and every shape in ``asked`` (the grid's answers) got the same one."""
    for index, part in enumerate(parts):
        request: list[JSONValue] = [
            candidate.source,
            ENTRY_POINT,
            [pair.request() for pair in part],
            (seed + index) % HARNESS_SEEDS,
        ]
        reply = candidate.call_harness(harness_source(), HARNESS_ENTRY, [request])
        if not reply.ok:
            kind = reply.error_kind.value if reply.error_kind is not None else "error"
            calls = sum(pair.calls for pair in part)
            return f"{kind}: {reply.error} (while sweeping {calls} shapes: {_named(part)})"
        runs = _read_runs(part, reply.values)
        if isinstance(runs, str):
            return runs
        for shape, config in asked.items():
            pair = next((p for p in part if (p.n, p.k) == (shape.n, shape.k)), None)
            if pair is not None and pair.asks(shape.m):
                swept = runs[(pair.n, pair.k)].at(shape.m)
                if swept != config:
                    return impurity(shape, config, swept)
    return None


def _named(part: Part) -> str:
    if len(part) == 1:
        pair = part[0]
        return f"every M in 1..{pair.dense_to} and {len(pair.extra)} larger, N={pair.n}, K={pair.k}"
    where = "on" if all(on_the_grid((pair.n, pair.k)) for pair in part) else "off"
    return f"{len(part)} fresh (N, K) pairs {where} the 128 grid"


def _read_runs(
    part: Part, values: tuple[JSONValue, ...] | None
) -> dict[tuple[int, int], _Runs] | str:
    """The harness's reply as runs per pair, or the candidate's fault it reports, named."""
    reply = values[0] if values is not None and len(values) == 1 else None
    if not isinstance(reply, dict):
        return MALFORMED
    if "at" in reply:
        return _reported_fault(reply)
    configs, runs = reply.get("configs"), reply.get("runs")
    if not isinstance(configs, list) or not isinstance(runs, list):
        return MALFORMED
    judged = [judge_answer(value) for value in configs]
    pairs = {(pair.n, pair.k): pair for pair in part}
    found: dict[tuple[int, int], _Runs] = {}
    for run in runs:
        numbers = _ints(run, 4)
        if numbers is None:
            return MALFORMED
        n, k, m, index = numbers
        pair = pairs.get((n, k))
        if pair is None or not 0 <= index < len(judged) or not pair.asks(m):
            return MALFORMED
        answer = judged[index]
        if isinstance(answer, str):
            return f"{ENTRY_POINT}({m}, {n}, {k}) {answer}"
        table = found.setdefault((n, k), _Runs([], []))
        if (table.starts and m <= table.starts[-1]) or (not table.starts and m != 1):
            return MALFORMED
        table.starts.append(m)
        table.configs.append(answer)
    return found if len(found) == len(pairs) else MALFORMED


MALFORMED = "the legality sweep answered malformed data"


def _reported_fault(reply: dict[str, JSONValue]) -> str:
    where = _ints(reply["at"], 3)
    if where is None:
        return MALFORMED
    m, n, k = where
    call = f"{ENTRY_POINT}({m}, {n}, {k})"
    if "raised" in reply:
        return f"{call} raised {str(reply['raised'])[:200]}"
    if "value" in reply:
        judged = judge_answer(reply["value"])
        return MALFORMED if isinstance(judged, GemmConfig) else f"{call} {judged}"
    return f"{call} returned a {str(reply.get('kind'))[:80]}: expected a list of 6 ints"


def _ints(value: JSONValue, count: int) -> list[int] | None:
    """``value`` when it is a list of ``count`` ints, else None."""
    if not isinstance(value, list) or len(value) != count:
        return None
    numbers = [item for item in value if type(item) is int]
    return numbers if len(numbers) == count else None
