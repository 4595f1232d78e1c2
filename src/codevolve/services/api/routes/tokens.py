"""API tokens: the admin creates, lists and revokes them. A token is shown once."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Request, Response, status

from codevolve.program_db import repository
from codevolve.program_db.tokens import ApiToken
from codevolve.services.api.auth import AdminDep
from codevolve.services.api.deps import ReadSessionDep, SessionDep, state_of
from codevolve.services.api.schemas import TokenCreate, TokenCreated, TokenList, TokenPublic

router = APIRouter(
    prefix="/api/v1/tokens",
    tags=["tokens"],
    responses={
        401: {"description": "missing or invalid token"},
        403: {"description": "only the admin token may manage tokens"},
    },
)


def _public(token: ApiToken) -> TokenPublic:
    return TokenPublic(
        id=token.id,
        owner=token.owner,
        can_upload=token.can_upload,
        created_at=token.created_at,
        revoked_at=token.revoked_at,
    )


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_token(body: TokenCreate, session: SessionDep, _admin: AdminDep) -> TokenCreated:
    """A new token for ``owner``; the answer is the only place the token appears."""
    token, secret = await repository.create_token(
        session, owner=body.owner, can_upload=body.can_upload
    )
    return TokenCreated(**_public(token).model_dump(), token=secret)


@router.get("")
async def list_tokens(session: ReadSessionDep, _admin: AdminDep) -> TokenList:
    return TokenList(tokens=[_public(t) for t in await repository.list_tokens(session)])


@router.delete(
    "/{token_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={404: {"description": "no such live token"}},
)
async def revoke_token(
    request: Request,
    token_id: Annotated[str, Path(pattern=r"^[0-9a-f]{32}$")],
    session: SessionDep,
    _admin: AdminDep,
) -> Response:
    """Revoke a token: refused at once by this API process, within a few seconds by others
    (each keeps the tokens it checked for that long, token_cache.py)."""
    if not await repository.revoke_token(session, token_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no live token {token_id}")
    state_of(request).tokens.forget(token_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
