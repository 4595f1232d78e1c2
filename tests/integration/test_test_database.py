"""The test fixtures make the Postgres database they connect to: a fresh server has only
``postgres`` and the templates, and the suite must not skip (or fail) for want of ``test``."""

from __future__ import annotations

import uuid

from sqlalchemy.engine import make_url

from tests.integration.conftest import POSTGRES_ADMIN, drop_database, postgres_error


def test_a_missing_test_database_is_created(postgres_available: None) -> None:
    name = f"cv_admin_{uuid.uuid4().hex[:12]}"
    admin = make_url(POSTGRES_ADMIN).set(database=name).render_as_string(hide_password=False)
    try:
        assert postgres_error(admin) is None
        assert postgres_error(admin) is None  # a second call finds it there
    finally:
        drop_database(name)


def test_an_unreachable_server_is_named() -> None:
    admin = make_url(POSTGRES_ADMIN).set(port=1).render_as_string(hide_password=False)
    error = postgres_error(admin)
    assert error is not None
    assert "could not be created" not in error
