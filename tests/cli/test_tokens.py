"""``codevolve token``: the printed token works against the API, once revoked it does not.

Sync tests: the command line runs its own event loop."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from codevolve.services.api.app import create_app
from codevolve.services.cli import main
from codevolve.services.settings import Settings


async def _status(db: str, token: str, path: str = "/api/v1/jobs") -> int:
    app = create_app(Settings(db=db, admin_token=None))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://test") as client,
    ):
        response = await client.get(path, headers={"Authorization": f"Bearer {token}"})
        return response.status_code


def test_a_created_token_is_printed_once_works_and_can_be_revoked(
    migrated_sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = migrated_sqlite_url
    assert main(["token", "create", "--owner", "alice", "--upload", "--db", db]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("cv_") and len(token) > 40
    assert asyncio.run(_status(db, token)) == 200

    assert main(["token", "list", "--db", migrated_sqlite_url]) == 0
    listing = capsys.readouterr().out
    assert "alice" in listing and "upload" in listing and token not in listing
    token_id = listing.split()[0]
    assert main(["token", "revoke", token_id, "--db", migrated_sqlite_url]) == 0
    assert asyncio.run(_status(db, token)) == 401


def test_an_owner_name_the_api_would_refuse_is_a_usage_error(
    migrated_sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["token", "create", "--owner", "a b", "--db", migrated_sqlite_url]) == 2
    assert "--owner" in capsys.readouterr().err
