"""Island maintenance: migration and resets on fixed proposal indices."""

from __future__ import annotations

import numpy as np

from codevolve.core.config import RunConfig
from codevolve.services.controller import islands
from codevolve.services.controller.parents import ParentCache
from tests.unit.services.controller.conftest import Stored
from tests.unit.services.controller.test_parents import _seeded


def test_maintenance_is_due_on_multiples_of_its_intervals_never_at_zero() -> None:
    config = RunConfig(problem="example", islands=2, migration_interval=4, reset_interval=6)
    due = {index: islands.due(config, index) for index in (0, 4, 6, 12, 13)}
    assert due == {
        0: (False, False),
        4: (True, False),
        6: (False, True),
        12: (True, True),
        13: (False, False),
    }


async def test_a_reset_bumps_an_epoch_and_the_mirror_is_read_back(stored: Stored) -> None:
    await _seeded(stored)
    config = stored.job.config.model_copy(update={"reset_interval": 3})
    parents = ParentCache(stored.store, config)
    before = (await parents.archive()).epochs
    await islands.maintain(stored.store, parents, config, index=3, rng=np.random.default_rng(1))
    assert parents.mirror is not None
    after = parents.mirror.epochs
    assert sum(after.values()) == sum(before.values()) + 1  # the worse half of two islands
    async with stored.store.transaction() as unit:
        assert (await unit.archive()).epochs == after


async def test_no_maintenance_leaves_the_mirror_alone(stored: Stored) -> None:
    parents = ParentCache(stored.store, stored.job.config)
    mirror = await parents.archive()
    await islands.maintain(
        stored.store, parents, stored.job.config, index=7, rng=np.random.default_rng(1)
    )
    assert parents.mirror is mirror
