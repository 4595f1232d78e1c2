"""An unexpected failure is one logged 500 with a request id, and the client's keep-alive
connection survives it (uvicorn closes a connection whose app raised after answering)."""

from __future__ import annotations

import json
import logging
import socket

import pytest

from codevolve.services.api.app import create_app
from codevolve.services.settings import Settings
from tests.api.conftest import served

TIMEOUT_S = 10.0  # seconds


def _exchange(sock: socket.socket, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send one request on ``sock`` and read one response (Content-Length framed)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        body += chunk
    return int(status_line.split()[1]), headers, body


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: test\r\nConnection: keep-alive\r\n\r\n".encode()


def test_a_failing_route_answers_500_once_and_the_connection_stays_open(
    migrated_postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(Settings(db=migrated_postgres_url, admin_token="x"))

    async def broken() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/broken", broken)
    with (
        caplog.at_level(logging.ERROR, logger="codevolve.services.api.errors"),
        served(app) as (host, port),
        socket.create_connection((host, port), timeout=TIMEOUT_S) as sock,
    ):
        status, headers, body = _exchange(sock, _get("/broken"))
        assert status == 500
        request_id = headers["x-request-id"]
        assert json.loads(body) == {"detail": f"internal server error (request {request_id})"}
        # the same connection serves the next request
        status, _, body = _exchange(sock, _get("/api/v1/health"))
        assert status == 200 and json.loads(body)["status"] == "ok"
    (record,) = [r for r in caplog.records if r.name == "codevolve.services.api.errors"]
    assert request_id in record.getMessage() and "/broken" in record.getMessage()
    assert record.exc_info is not None and "a bug" in str(record.exc_info[1])
