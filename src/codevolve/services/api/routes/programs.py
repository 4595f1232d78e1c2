"""Programs: one program with its source, stage metrics, artifacts, diff to parent and lineage."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from codevolve.services.api.auth import PrincipalDep
from codevolve.services.api.deps import ReadSessionDep
from codevolve.services.api.queries import program_detail, visible_program
from codevolve.services.api.schemas import ProgramDetail

router = APIRouter(prefix="/api/v1/programs", tags=["programs"])
ProgramIdPath = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="program id")]


@router.get(
    "/{program_id}",
    responses={
        401: {"description": "missing or invalid token"},
        404: {"description": "no such program (or another owner's)"},
    },
)
async def get_program(
    program_id: ProgramIdPath, session: ReadSessionDep, principal: PrincipalDep
) -> ProgramDetail:
    owner = None if principal.is_admin else principal.owner
    program = await visible_program(session, program_id, owner=owner)
    return await program_detail(session, program)
