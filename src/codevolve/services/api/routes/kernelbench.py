"""KernelBench: one row per KernelBench-format problem's job and fast_p over them, the table
``codevolve kernelbench`` prints (read_models/kernelbench.py)."""

from __future__ import annotations

from fastapi import APIRouter

from codevolve.services.api.auth import PrincipalDep
from codevolve.services.api.deps import ReadSessionDep
from codevolve.services.api.queries import kernel_table
from codevolve.services.api.schemas import KernelTable

router = APIRouter(prefix="/api/v1/kernelbench", tags=["kernelbench"])


@router.get("", responses={401: {"description": "missing or invalid token"}})
async def kernelbench(session: ReadSessionDep, principal: PrincipalDep) -> KernelTable:
    """Your KernelBench jobs (every owner's for the admin), newest first, each with its
    confirmed speedup over eager and ``torch.compile``; a problem run more than once shows its
    newest job only. ``summary`` gives fast_p for p in 0, 1, 1.5 and 2 over those rows. Jobs of
    other problems are not listed."""
    owner = None if principal.is_admin else principal.owner
    return await kernel_table(session, owner=owner)
