"""Every error the API answers: one JSON shape, ``{"detail": ...}``, short, and never a copy of
what the client sent.

Clients send anything: NaN and Infinity (Python's JSON parser accepts both), lone surrogates
(``"\\ud800"`` is valid JSON but cannot be encoded as UTF-8), megabytes in one field. An error
that copied such input back would fail to encode (a 500 instead of the 422) or echo the megabytes.
So validation errors keep ``loc``, ``msg`` and ``type`` only, each string made encodable and cut
short, and at most :data:`MAX_ERRORS` of them.

:class:`ErrorBoundary` is the API's boundary for unexpected failures: it logs the failure with a
request id and answers a 500 naming that id. It does not re-raise: the server would then close
the client's keep-alive connection after the answer was sent.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

MAX_ERRORS = 20  # validation errors listed in one answer; the rest are counted
MAX_MESSAGE = 300  # characters of a message
MAX_LOC_PART = 64  # characters of one part of a location (a dict key the client chose)


def clean(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` as something JSON can carry: lone surrogates escaped, at most ``limit`` chars."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _loc_part(part: object) -> str | int:
    return part if isinstance(part, int) else clean(str(part), MAX_LOC_PART)


def _public_error(error: Mapping[str, Any]) -> dict[str, Any]:
    """One validation error without its ``input`` (and ``ctx``, which may hold it)."""
    message = str(error.get("msg", "invalid"))
    context = error.get("ctx")
    if error.get("type") == "json_invalid" and isinstance(context, Mapping):
        message = f"{message}: {context.get('error', '')}"  # e.g. "Expecting value"
    return {
        "loc": [_loc_part(part) for part in error.get("loc", ())],
        "msg": clean(message),
        "type": clean(str(error.get("type", "")), MAX_LOC_PART),
    }


def public_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    shown = [_public_error(error) for error in errors[:MAX_ERRORS]]
    if len(errors) > MAX_ERRORS:
        more = len(errors) - MAX_ERRORS
        shown.append({"loc": ["body"], "msg": f"{more} more errors", "type": "too_many_errors"})
    return shown


async def validation_failed(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(
        {"detail": public_errors(exc.errors())},
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
    )


async def http_error(_request: Request, exc: Exception) -> Response:
    """Starlette's answer to an HTTPException, with a detail that JSON can carry."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers) if exc.headers else None
    if exc.status_code in (status.HTTP_204_NO_CONTENT, status.HTTP_304_NOT_MODIFIED):
        return Response(status_code=exc.status_code, headers=headers)
    detail = clean(exc.detail) if isinstance(exc.detail, str) else exc.detail
    return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)


class WatchedSend:
    """An ASGI ``send`` that notes when a response has started: after that, an error can only
    close the connection, never answer it."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        self.started = self.started or message["type"] == "http.response.start"
        await self._send(message)


class ErrorBoundary:
    """ASGI middleware: an unexpected exception becomes one logged 500, the connection stays."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        watched = WatchedSend(send)
        try:
            await self.app(scope, receive, watched)
        except Exception as exc:  # the API's boundary: log with ids, answer a plain 500
            request_id = uuid.uuid4().hex[:16]
            method, path = scope.get("method", ""), scope.get("path", "")
            log.error("request %s: %s %s failed", request_id, method, path, exc_info=exc)
            if watched.started:  # half an answer went out: only closing the connection ends it
                raise
            response = JSONResponse(
                {"detail": f"internal server error (request {request_id})"},
                status_code=status.HTTP_500_INTERNAL_SERVER_ERROR,
                headers={"X-Request-ID": request_id},
            )
            await response(scope, receive, send)
