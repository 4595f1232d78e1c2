"""An in-memory copy of one job's archive (island epochs and elites), kept by the job's controller.

The controller is the only writer of its job's archive, so it can draw parents from memory and
send the database only what changes. The database statements stay the guarded ones of
:mod:`.elites` (epoch-checked, strictly better): when the database answers differently from the
copy (someone else wrote), the controller drops the copy and loads it again.

The copy decides exactly as the database does: :meth:`ArchiveMirror.offer` is the conditional
upsert of :func:`.elites.add_elite`, and :meth:`ArchiveMirror.sample` draws with the same pure
functions, and the same random draws, as :func:`.elites.sample`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.program import CellKey, IslandId, JobId, ProgramId
from codevolve.program_db import archive
from codevolve.program_db.archive import AddOutcome, EliteRef
from codevolve.program_db.elites import island_epochs, job_elites
from codevolve.program_db.errors import ProgramDbError


@dataclass(frozen=True, slots=True)
class Drawn:
    """A parent and inspirations drawn from one island, and the island's epoch then."""

    parent: EliteRef
    inspirations: tuple[EliteRef, ...]
    epoch: int


class ArchiveMirror:
    """Island epochs and one elite per (island, cell), as the database holds them."""

    def __init__(self, epochs: dict[IslandId, int], elites: dict[IslandId, list[EliteRef]]) -> None:
        self._epochs = dict(epochs)
        self._cells: dict[IslandId, dict[CellKey, EliteRef]] = {
            island: {elite.cell: elite for elite in elites.get(island, [])} for island in epochs
        }
        self._ranked: dict[IslandId, list[EliteRef]] = {}  # by_rank order, until a cell changes

    @classmethod
    async def load(cls, session: AsyncSession, job_id: JobId) -> ArchiveMirror:
        """Two small queries: the islands' epochs and every elite of the job."""
        return cls(await island_epochs(session, job_id), await job_elites(session, job_id))

    @property
    def epochs(self) -> dict[IslandId, int]:
        return dict(self._epochs)

    def program_ids(self) -> set[ProgramId]:
        """Every program that is an elite somewhere (bounded by islands x cells)."""
        return {elite.program_id for cells in self._cells.values() for elite in cells.values()}

    def elites(self, island: IslandId) -> list[EliteRef]:
        return list(self._island(island).values())

    def sample(
        self,
        island: IslandId,
        rng: np.random.Generator,
        *,
        exploit_ratio: float,
        temperature: float,
        top: int,
        diverse: int,
    ) -> Drawn | None:
        """A parent and inspirations from the island's elites; None while it has none."""
        elites = self._ranked.get(island)
        if elites is None:
            elites = self._ranked[island] = archive.by_rank(self.elites(island))
        if not elites:
            return None
        parent = archive.choose_parent(
            elites, rng, exploit_ratio=exploit_ratio, temperature=temperature, ranked=True
        )
        inspirations = archive.choose_inspirations(
            elites, parent, rng, top=top, diverse=diverse, ranked=True
        )
        return Drawn(parent=parent, inspirations=tuple(inspirations), epoch=self._epochs[island])

    def offer(
        self, *, island: IslandId, cell: CellKey, program_id: ProgramId, score: float, epoch: int
    ) -> AddOutcome:
        """Offer a program to a cell, as the database's conditional upsert would: stale after a
        reset, new into an empty cell, improved over a strictly worse elite, else not added."""
        cells = self._island(island)
        if self._epochs[island] != epoch:
            return AddOutcome.STALE
        if math.isnan(score):
            return AddOutcome.NOT_ADDED
        current = cells.get(cell)
        if current is not None and not current.score < score:
            return AddOutcome.NOT_ADDED
        cells[cell] = EliteRef(cell=cell, program_id=program_id, score=score)
        self._ranked.pop(island, None)
        return AddOutcome.NEW if current is None else AddOutcome.IMPROVED

    def _island(self, island: IslandId) -> dict[CellKey, EliteRef]:
        cells = self._cells.get(island)
        if cells is None:
            raise ProgramDbError(f"the archive has no island {island}")
        return cells
