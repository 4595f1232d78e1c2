"""Where parents and inspirations come from: the job's archive mirrored in memory, and a cache
of elite programs.

The controller is the only writer of its job's archive, so parents are drawn from the mirror
(:class:`~codevolve.program_db.mirror.ArchiveMirror`) without a query, and the parent and
inspiration programs come from a small cache of elite programs, loaded with the mirror. A
transaction that fails after the mirror decided something drops the mirror (:meth:`forget`):
the next draw loads it again from what the database committed.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from codevolve.core.config import RunConfig
from codevolve.core.program import Program, ProgramId
from codevolve.core.prompt import ProgramView
from codevolve.program_db.elites import Sample
from codevolve.program_db.job_store import JobStore, JobTransaction
from codevolve.program_db.mirror import ArchiveMirror

CACHED_PROGRAMS = 4096  # elite programs kept in memory for prompts (parents, inspirations)


class ParentCache:
    """The mirrored archive, the elite programs it names, and their prompt views."""

    def __init__(self, store: JobStore, config: RunConfig) -> None:
        self._store = store
        self._config = config
        self.mirror: ArchiveMirror | None = None  # None: (re)load from the database
        self._programs: OrderedDict[ProgramId, Program] = OrderedDict()
        self._views: dict[ProgramId, tuple[Program, ProgramView]] = {}  # of cached programs
        self.changed = asyncio.Event()  # set when elites enter; proposals wait on it

    def forget(self) -> None:
        """Drop the mirror: it may hold what a rolled-back transaction wrote."""
        self.mirror = None

    async def archive(self) -> ArchiveMirror:
        """The mirror, loaded in a transaction of its own when there is none."""
        if self.mirror is None:
            async with self._store.transaction() as unit:
                mirror = await self.load(unit)
            self.mirror = self.mirror or mirror
        return self.mirror

    async def load(self, unit: JobTransaction) -> ArchiveMirror:
        """The archive from the database, and every elite program into the cache (one query of
        at most islands x cells rows), so that drawing a parent never waits for the database.
        The caller decides when it becomes :attr:`mirror`."""
        mirror = await unit.archive()
        self.cache(
            await unit.programs([p for p in mirror.program_ids() if p not in self._programs])
        )
        return mirror

    async def sample(self, island: int, rng: np.random.Generator) -> Sample | None:
        """A parent and inspirations drawn from the mirror; their programs come from the cache,
        or from one query for those it lacks. None while the island has no elite."""
        config = self._config
        mirror = await self.archive()
        drawn = mirror.sample(
            island,
            rng,
            exploit_ratio=config.exploit_ratio,
            temperature=config.rank_temperature,
            top=config.top_inspirations,
            diverse=config.diverse_inspirations,
        )
        if drawn is None:
            return None
        ids = [drawn.parent.program_id, *(elite.program_id for elite in drawn.inspirations)]
        programs = await self._cached(ids)
        if not programs or programs[0].id != drawn.parent.program_id:
            raise RuntimeError(f"elite program {drawn.parent.program_id} is missing")
        return Sample(parent=programs[0], inspirations=tuple(programs[1:]), epoch=drawn.epoch)

    def cache(self, programs: Sequence[Program]) -> None:
        """Keep ``programs`` (most recent last); the least recently used leave past the limit."""
        for program in programs:
            self._programs[program.id] = program
            self._programs.move_to_end(program.id)
        while len(self._programs) > CACHED_PROGRAMS:
            evicted, _program = self._programs.popitem(last=False)
            self._views.pop(evicted, None)

    def view(self, program: Program) -> ProgramView:
        """The prompt's view of a cached program, made once per program as cached (parents and
        inspirations recur in proposal after proposal)."""
        made = self._views.get(program.id)
        if made is not None and made[0] is program:
            return made[1]
        view = ProgramView(
            id=program.id,
            source=program.source,
            score=program.score,
            metrics=program.metrics,
            cases=program.cases,
            feedback=program.feedback,
            error=program.error,
            stderr=program.artifacts.get("stderr", ""),
        )
        self._views[program.id] = (program, view)
        return view

    async def _cached(self, ids: Sequence[ProgramId]) -> list[Program]:
        missing = [program_id for program_id in ids if program_id not in self._programs]
        if missing:
            async with self._store.reading() as unit:
                self.cache(await unit.programs(missing))
        found = []
        for program_id in ids:
            program = self._programs.get(program_id)
            if program is not None:
                self._programs.move_to_end(program_id)
                found.append(program)
        return found
