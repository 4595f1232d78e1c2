"""Island maintenance: migration and island resets, on fixed proposal indices so that a resumed
run keeps pace. Both go through the database's guarded statements (epoch-checked, strictly
better); the mirror is then read back in the same transaction."""

from __future__ import annotations

import logging

import numpy as np

from codevolve.core.config import RunConfig
from codevolve.program_db.job_store import JobStore
from codevolve.services.controller.parents import ParentCache

log = logging.getLogger(__name__)


def due(config: RunConfig, index: int) -> tuple[bool, bool]:
    """(migrate, reset) before proposal ``index``: never before the first proposal."""
    migrating = bool(config.migration_interval) and index % config.migration_interval == 0
    resetting = bool(config.reset_interval) and index % config.reset_interval == 0
    return (migrating and index > 0, resetting and index > 0)


async def maintain(
    store: JobStore,
    parents: ParentCache,
    config: RunConfig,
    *,
    index: int,
    rng: np.random.Generator,
) -> None:
    """Migrate and reset the islands if proposal ``index`` is due for it; the resets draw from
    ``rng`` (the proposal's generator), so a run stays reproducible from its seed."""
    migrating, resetting = due(config, index)
    if not (migrating or resetting):
        return
    try:
        async with store.transaction() as unit:
            if migrating:
                await unit.migrate(migrants=config.migrants)
            if resetting:
                reset = await unit.reset_islands(rng)
                log.info("job %s: islands %s reset at proposal %d", store.job_id, reset, index)
            mirror = await parents.load(unit)
    except BaseException:
        parents.forget()
        raise
    parents.mirror = mirror
