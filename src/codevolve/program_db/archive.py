"""MAP-Elites and island logic as pure functions: cells, parent and inspiration choice, migration
and island resets.

Nothing here touches a database: the repository reads the (bounded) elites of an island, asks these
functions what to do, and writes the answer. Every random choice draws from the injected generator,
so a run is reproducible from its seed.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from codevolve.core.problem import FeatureSpec
from codevolve.core.program import CellKey, IslandId, ProgramId
from codevolve.program_db.errors import ProgramDbError

CELL_SEPARATOR = ","


class AddOutcome(StrEnum):
    """What offering a program to a cell did."""

    NEW = "new"  # the cell was empty; the program is its first elite
    IMPROVED = "improved"  # the program beat the cell's elite and replaced it
    NOT_ADDED = "not_added"  # the cell's elite is at least as good
    STALE = "stale"  # the island was reset since the parent was sampled; nothing written


WRITTEN = (AddOutcome.NEW, AddOutcome.IMPROVED)  # the outcomes that change the archive


@dataclass(frozen=True, slots=True)
class EliteRef:
    """The elite of one cell of one island: which program, and its score (higher is better)."""

    cell: CellKey
    program_id: ProgramId
    score: float


Migration = tuple[IslandId, IslandId, EliteRef]  # (source island, destination island, elite)


# ---------------------------------------------------------------------------------------- cells


def cell_key(features: Mapping[str, float], specs: Sequence[FeatureSpec]) -> CellKey:
    """The cell of a program: one bin per descriptor, always within ``[0, bins)``.

    Total on purpose: a missing or NaN feature lands in bin 0, values outside ``[low, high]`` are
    clamped to the first or last bin, so a program with odd features still has a cell.
    """
    return tuple(_bin(features.get(spec.name), spec) for spec in specs)


def _bin(value: float | None, spec: FeatureSpec) -> int:
    last = max(spec.bins, 1) - 1
    if value is None or math.isnan(value) or not spec.high > spec.low:
        return 0
    if value >= spec.high:
        return last
    if value <= spec.low:
        return 0
    fraction = (value - spec.low) / (spec.high - spec.low)
    return min(max(int(fraction * (last + 1)), 0), last)


def cell_to_text(cell: CellKey) -> str:
    """The stored form of a cell key: ``(3, 5)`` is ``"3,5"``; the empty key is ``""``."""
    return CELL_SEPARATOR.join(str(index) for index in cell)


def cell_from_text(text: str) -> CellKey:
    if not text:
        return ()
    try:
        return tuple(int(part) for part in text.split(CELL_SEPARATOR))
    except ValueError as error:
        raise ProgramDbError(f"not a cell key: {text!r}") from error


# ------------------------------------------------------------------------------------- sampling


def rank_weights(n: int, temperature: float) -> npt.NDArray[np.float64]:
    """Sampling weights of ranks ``0..n-1`` (0 is best): ``exp(-rank / temperature)``, summing to 1.

    A low temperature concentrates on the best elites; a high one approaches uniform.
    """
    if temperature <= 0:
        raise ProgramDbError(f"rank temperature must be positive, got {temperature}")
    if n <= 0:
        return np.zeros(0, dtype=np.float64)
    weights: npt.NDArray[np.float64] = np.exp(-np.arange(n, dtype=np.float64) / temperature)
    normalised: npt.NDArray[np.float64] = weights / weights.sum()
    return normalised


def by_rank(elites: Sequence[EliteRef]) -> list[EliteRef]:
    """Best first; equal scores ordered by cell so that the order never depends on the database."""
    return sorted(elites, key=lambda e: (-_comparable(e.score), e.cell, e.program_id))


def _comparable(score: float) -> float:
    return -math.inf if math.isnan(score) else score


def choose_parent(
    elites: Sequence[EliteRef],
    rng: np.random.Generator,
    *,
    exploit_ratio: float,
    temperature: float,
    ranked: bool = False,
) -> EliteRef:
    """With probability ``exploit_ratio`` pick by score rank (see :func:`rank_weights`), otherwise
    uniformly over the occupied cells, which keeps weak niches alive as stepping stones.
    ``ranked``: the elites are already in :func:`by_rank` order."""
    if not elites:
        raise ProgramDbError("cannot choose a parent from an empty island")
    ranked_elites = elites if ranked else by_rank(elites)
    if rng.random() < exploit_ratio:
        # rng.choice(n, p=rank_weights(n, temperature)), with the same draw and the same result:
        # numpy maps one uniform through the weights' CDF (side="right"). Its call costs tens of
        # microseconds per proposal (it validates p each time); a bisection costs one.
        cdf = _rank_cdf(len(ranked_elites), temperature)
        index = bisect.bisect_right(cdf, rng.random())
    else:
        index = int(rng.integers(len(ranked_elites)))
    return ranked_elites[index]


@functools.lru_cache(maxsize=64)
def _rank_cdf(n: int, temperature: float) -> list[float]:
    """The cumulative rank weights exactly as ``Generator.choice`` computes them from ``p``
    (``cumsum``, then divided by the last element), shared by every draw."""
    cdf = rank_weights(n, temperature).cumsum()
    cdf /= cdf[-1]
    return [float(value) for value in cdf]


def choose_inspirations(
    elites: Sequence[EliteRef],
    parent: EliteRef,
    rng: np.random.Generator,
    *,
    top: int,
    diverse: int,
    ranked: bool = False,
) -> list[EliteRef]:
    """The ``top`` best elites other than the parent, then ``diverse`` random others; no program
    appears twice. ``ranked``: the elites are already in :func:`by_rank` order."""
    seen = {parent.program_id}
    others: list[EliteRef] = []
    for elite in elites if ranked else by_rank(elites):
        if elite.program_id not in seen:
            seen.add(elite.program_id)
            others.append(elite)
    best, rest = others[: max(top, 0)], others[max(top, 0) :]
    count = min(max(diverse, 0), len(rest))
    if count == 0:
        return best
    if count == 1:
        # rng.choice(n, size=1, replace=False), with the same draw and the same result: one
        # bounded integer (a test compares the two); the call costs a tenth of choice's.
        return [*best, rest[int(rng.integers(len(rest)))]]
    picked = rng.choice(len(rest), size=count, replace=False)
    return best + [rest[int(i)] for i in picked]


# ------------------------------------------------------------------------- migration and resets


def migration_plan(
    best_per_island: Mapping[IslandId, Sequence[EliteRef]], *, migrants: int
) -> list[Migration]:
    """Each island sends its ``migrants`` best elites to the next island of the ring (the last
    island sends to the first). One island alone has no one to send to."""
    islands = sorted(best_per_island)
    if len(islands) < 2 or migrants <= 0:
        return []
    plan: list[Migration] = []
    for position, source in enumerate(islands):
        destination = islands[(position + 1) % len(islands)]
        for elite in by_rank(best_per_island[source])[:migrants]:
            plan.append((source, destination, elite))
    return plan


def islands_to_reset(
    best_score_per_island: Mapping[IslandId, float | None], rng: np.random.Generator
) -> tuple[list[IslandId], list[IslandId]]:
    """Which islands restart, and who reseeds them.

    The worse half (rounded down) is reset; an island without elites counts as the worst; ties
    are broken at random. ``donors[i]`` is a random surviving island with elites, whose best elite
    seeds ``reset[i]``. Nothing is reset while no island has an elite.
    """
    islands = [int(i) for i in rng.permutation(sorted(best_score_per_island))]
    scores = {i: _reset_rank(best_score_per_island[i]) for i in islands}
    ordered = sorted(islands, key=lambda i: scores[i])  # stable: the permutation breaks ties
    half = len(ordered) // 2
    reset, survivors = ordered[:half], ordered[half:]
    eligible = [i for i in survivors if scores[i] > -math.inf]
    if not reset or not eligible:
        return [], []
    donors = [eligible[int(rng.integers(len(eligible)))] for _ in reset]
    return reset, donors


def _reset_rank(score: float | None) -> float:
    return -math.inf if score is None else _comparable(score)
