"""Bearer-token authentication.

Two kinds of caller: the admin, whose token comes from the environment (``CODEVOLVE_ADMIN_TOKEN``)
and who may create user tokens and see every job; and users, whose tokens live hashed in the
database. A job belongs to the owner of the token that created it; other users get 404, not 403,
so that job ids do not leak. The dashboard also accepts a sign-in cookie (a browser cannot add a
header to a page load), set by signing in at ``/login``: it holds a session id, never the token
(logins.py). ``/metrics`` takes the admin token or ``CODEVOLVE_METRICS_TOKEN``, unless
``CODEVOLVE_PUBLIC_METRICS`` is set.

A user token found live is trusted for a few seconds without asking the database again
(token_cache.py): a token revoked through another process is refused within that time.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from codevolve.core.job import Job
from codevolve.program_db import repository
from codevolve.program_db.tokens import ApiToken, hash_token
from codevolve.services.api.deps import read_sessions_of, settings_of, state_of

ADMIN_OWNER = "admin"
COOKIE = "codevolve_session"

_bearer = HTTPBearer(auto_error=False, description="a token from `codevolve token create`")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling."""

    owner: str
    is_admin: bool = False
    can_upload: bool = False

    def sees(self, job: Job) -> bool:
        return self.is_admin or job.owner == self.owner


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who reads the dashboard: a principal, or anyone when the dashboard is public."""

    principal: Principal | None

    @property
    def owner_filter(self) -> str | None:
        """The owner whose jobs are listed; None lists every job."""
        if self.principal is None or self.principal.is_admin:
            return None
        return self.principal.owner

    def sees(self, job: Job) -> bool:
        return self.principal is None or self.principal.sees(job)


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=message, headers={"WWW-Authenticate": "Bearer"}
    )


async def principal_of(request: Request, secret: str) -> Principal | None:
    """Who holds ``secret``: the admin, the owner of a live token, or None."""
    admin = settings_of(request).admin_token
    if admin and hmac.compare_digest(secret.encode(), admin.encode()):
        return Principal(owner=ADMIN_OWNER, is_admin=True, can_upload=True)
    token = await _live_token(request, secret)
    if token is None:
        return None
    return Principal(owner=token.owner, can_upload=token.can_upload)


async def _live_token(request: Request, secret: str) -> ApiToken | None:
    """The live token of ``secret``: from the process's token cache while it holds it (a few
    seconds, token_cache.py), else from the database, on a connection of its own."""

    async def lookup() -> ApiToken | None:
        async with read_sessions_of(request)() as session:
            return await repository.find_token(session, secret)

    return await state_of(request).tokens.live(hash_token(secret), lookup)


async def current_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller of an API route: 401 without a valid bearer token."""
    if credentials is None:
        raise _unauthorized("missing bearer token (Authorization: Bearer <token>)")
    principal = await principal_of(request, credentials.credentials)
    if principal is None:
        raise _unauthorized("invalid or revoked token")
    return principal


async def current_viewer(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Viewer:
    """The reader of a dashboard page: anyone if the dashboard is public, else a token from the
    Authorization header or the login cookie."""
    secret = (
        credentials.credentials
        if credentials is not None
        else state_of(request).logins.token_of(request.cookies.get(COOKIE, ""))
    )
    principal = None if not secret else await principal_of(request, secret)
    if principal is None and not settings_of(request).public_dashboard:
        if "text/html" in request.headers.get("accept", ""):  # a browser: to the sign-in form
            raise HTTPException(status.HTTP_303_SEE_OTHER, headers={"Location": "/login"})
        raise _unauthorized("the dashboard needs a token: sign in at /login")
    return Viewer(principal)


def require_metrics_reader(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """``/metrics`` counts every owner's jobs: the admin or the metrics token, unless public."""
    settings = settings_of(request)
    if settings.public_metrics:
        return
    if credentials is None:
        raise _unauthorized("/metrics needs the metrics or admin token (Authorization: Bearer)")
    given = credentials.credentials.encode()
    allowed = (t.encode() for t in (settings.metrics_token, settings.admin_token) if t)
    if not any([hmac.compare_digest(given, token) for token in allowed]):
        raise _unauthorized("invalid metrics token")


def is_https(request: Request) -> bool:
    """Whether the browser reached us over HTTPS: the request's scheme (which uvicorn takes from a
    proxy it trusts, ``--forwarded-allow-ips``), or a proxy's ``X-Forwarded-Proto`` when
    ``CODEVOLVE_TRUST_PROXY_HEADERS`` says the proxy in front sets it."""
    if request.url.scheme == "https":
        return True
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return settings_of(request).trust_proxy_headers and forwarded == "https"


def require_admin(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    if not principal.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="only the admin token may do this")
    return principal


def require_upload(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    if not principal.can_upload:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            detail="uploading a bundle runs its evaluator on workers: this token lacks can_upload",
        )
    return principal


PrincipalDep = Annotated[Principal, Depends(current_principal)]
AdminDep = Annotated[Principal, Depends(require_admin)]
UploaderDep = Annotated[Principal, Depends(require_upload)]
ViewerDep = Annotated[Viewer, Depends(current_viewer)]
MetricsReaderDep = Depends(require_metrics_reader)
