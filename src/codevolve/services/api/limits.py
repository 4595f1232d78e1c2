"""Request body limits: a 413 before a body over its route's limit is read into memory.

A declared ``Content-Length`` over the limit is refused before any byte is read; a body without
one (chunked) is counted as it arrives and refused at the first chunk past the limit. JSON bodies
get :data:`MAX_JSON_BODY_BYTES`; a bundle upload carries base64 files and gets
:data:`MAX_BUNDLE_BODY_BYTES`, derived from the bundle loader's own size limit.
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import status
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codevolve.problems.openevolve.bundle import MAX_BUNDLE_BYTES
from codevolve.services.api.errors import WatchedSend

MAX_JSON_BODY_BYTES = 1 << 20  # 1 MiB: a job request is a few hundred bytes
# Base64 grows data by 4/3; JSON quoting and keys add a little. A body above this cannot decode
# to a bundle within the loader's limit.
MAX_BUNDLE_BODY_BYTES = MAX_BUNDLE_BYTES * 4 // 3 + (256 << 10)
BUNDLE_PATH = "/api/v1/jobs/bundle"


class BodyTooLarge(HTTPException):
    """An HTTPException, so that FastAPI's body reading passes it on instead of a 400."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            status.HTTP_413_CONTENT_TOO_LARGE,
            detail=f"request body too large: the limit is {limit} bytes",
        )


class BodyLimit:
    """ASGI middleware enforcing a body limit per path (``limits``), else ``default``."""

    def __init__(self, app: ASGIApp, *, default: int, limits: Mapping[str, int]) -> None:
        self.app = app
        self.default = default
        self.limits = dict(limits)

    def limit_of(self, scope: Scope) -> int:
        path = str(scope.get("path", ""))
        return next((n for p, n in self.limits.items() if path.endswith(p)), self.default)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_of(scope)
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await _refuse(BodyTooLarge(limit), scope, receive, send)
            return
        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        watched = WatchedSend(send)
        try:
            await self.app(scope, counted_receive, watched)
        except BodyTooLarge as refused:  # read outside a route's handler
            if watched.started:
                raise
            await _refuse(refused, scope, receive, send)


async def _refuse(refused: BodyTooLarge, scope: Scope, receive: Receive, send: Send) -> None:
    response = JSONResponse({"detail": refused.detail}, status_code=refused.status_code)
    await response(scope, receive, send)
