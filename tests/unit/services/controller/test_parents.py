"""The parent cache: draws from the mirrored archive, elite programs kept in memory."""

from __future__ import annotations

import numpy as np
import pytest

from codevolve.services.controller import parents as parents_module
from codevolve.services.controller.parents import ParentCache
from codevolve.services.controller.results import ResultApplier
from tests.integration.conftest import evaluation_of, new_program
from tests.unit.services.controller.conftest import Stored
from tests.unit.services.controller.test_results import FEATURES


async def _seeded(stored: Stored) -> str:
    """The job with one evaluated seed, an elite on every island; returns its id."""
    seed = new_program(stored.job.id, name="seed", proposal_index=-1)
    async with stored.store.transaction() as unit:
        await unit.insert_program(seed)
    writer = ResultApplier(stored.store, ParentCache(stored.store, stored.job.config), FEATURES)
    await writer.apply([evaluation_of(seed, 2.0)], {seed.id: seed})
    return seed.id


async def test_an_empty_island_gives_no_parent(stored: Stored) -> None:
    parents = ParentCache(stored.store, stored.job.config)
    assert await parents.sample(0, np.random.default_rng(0)) is None


async def test_a_parent_is_drawn_from_the_committed_archive(stored: Stored) -> None:
    parents = ParentCache(stored.store, stored.job.config)
    assert await parents.sample(1, np.random.default_rng(0)) is None
    seed_id = await _seeded(stored)
    assert await parents.sample(1, np.random.default_rng(0)) is None  # the mirror is as loaded
    parents.forget()
    drawn = await parents.sample(1, np.random.default_rng(0))
    assert drawn is not None and drawn.parent.id == seed_id and drawn.inspirations == ()


async def test_the_cache_keeps_the_most_recently_used_programs(
    stored: Stored, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parents_module, "CACHED_PROGRAMS", 2)
    parents = ParentCache(stored.store, stored.job.config)
    a, b, c = (new_program(stored.job.id, name=n) for n in "abc")  # none in the database
    parents.cache([a, b])
    view = parents.view(b)
    assert parents.view(b) is view  # made once per cached program
    assert [p.id for p in await parents._cached([a.id])] == [a.id]  # a is now the most recent
    parents.cache([c])  # b, the least recently used, leaves
    assert [p.id for p in await parents._cached([a.id, b.id, c.id])] == [a.id, c.id]
    async with stored.store.transaction() as unit:
        await unit.insert_program(b)
    assert [p.id for p in await parents._cached([b.id])] == [b.id]  # read back from the database
    assert parents.view(b) is not view  # its view left with it
