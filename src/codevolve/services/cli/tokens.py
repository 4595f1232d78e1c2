"""``codevolve token``: API tokens, managed from the server's machine.

codevolve token create --owner NAME [--upload] [--db URL]   prints the token, once
codevolve token list [--db URL]
codevolve token revoke TOKEN_ID [--db URL]

Only the token's sha256 is stored; a lost token is revoked and a new one created. The admin token
itself is not stored: it is whatever ``CODEVOLVE_ADMIN_TOKEN`` says.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from codevolve.core.errors import ConfigError
from codevolve.services.cli.options import db_option

T = TypeVar("T")
OWNER_PATTERN = r"^[A-Za-z0-9_.@-]{1,200}$"  # the API's rule for owner names


def register(sub: Any) -> None:
    """Add ``token`` with its actions to the ``codevolve`` parser's subcommands."""
    token = sub.add_parser("token", help="create, list or revoke API tokens")
    actions = token.add_subparsers(dest="token_action", required=True)

    create = actions.add_parser("create", help="create a token and print it (shown once)")
    create.add_argument("--owner", required=True, help="who the token's jobs belong to")
    create.add_argument(
        "--upload", action="store_true", help="may upload problem bundles (runs their evaluators)"
    )
    db_option(create)
    create.set_defaults(handler=_cmd_create)

    listing = actions.add_parser("list", help="list tokens (never the tokens themselves)")
    db_option(listing)
    listing.set_defaults(handler=_cmd_list)

    revoke = actions.add_parser("revoke", help="revoke a token by its id")
    revoke.add_argument("token_id")
    db_option(revoke)
    revoke.set_defaults(handler=_cmd_revoke)


def _in_transaction(
    url: str, work: Callable[[AsyncSession], Awaitable[T]], *, write: bool = True
) -> T:
    """Run ``work`` in one committed transaction on an upgraded database (or, ``write=False``,
    on an existing database at head, changing nothing)."""
    from codevolve.services.database import database_session, reading_session

    async def go() -> T:
        async with (database_session if write else reading_session)(url) as session:
            return await work(session)

    return asyncio.run(go())


def _cmd_create(args: argparse.Namespace) -> int:
    from codevolve.program_db import repository

    if not re.fullmatch(OWNER_PATTERN, args.owner):
        raise ConfigError(f"--owner {args.owner!r}: letters, digits and _.@- only, 1-200 of them")

    async def create(session: AsyncSession) -> str:
        _token, secret = await repository.create_token(
            session, owner=args.owner, can_upload=args.upload
        )
        return secret

    print(_in_transaction(args.db, create))
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from codevolve.program_db import repository

    for token in _in_transaction(args.db, repository.list_tokens, write=False):
        state = "revoked" if token.revoked_at else "live"
        upload = "upload" if token.can_upload else "-"
        print(f"{token.id}  {token.owner:20}  {upload:6}  {state:7}  {token.created_at:%Y-%m-%d}")
    return 0


def _cmd_revoke(args: argparse.Namespace) -> int:
    from codevolve.program_db import repository

    async def revoke(session: AsyncSession) -> bool:
        return await repository.revoke_token(session, args.token_id)

    if not _in_transaction(args.db, revoke):
        raise ConfigError(
            f"no live token {args.token_id!r} in {args.db_shown}; `codevolve token list` shows them"
        )
    print(f"revoked {args.token_id}")
    return 0
