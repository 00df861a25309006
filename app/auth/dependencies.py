"""Authentication and authorisation as FastAPI dependencies (applied in app/main.py); all
coroutines, so that FastAPI does not hand them to a worker thread."""

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.auth.keys import OPEN, Principal
from app.auth.middleware import PRINCIPAL
from app.errors import ErrorCode, Forbidden

_BEARER = HTTPBearer(auto_error=False, description="An API key from API_KEYS (when set).")


async def authenticate(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
) -> Principal:
    """The caller, as AuthMiddleware found it (every caller when no keys are set). The bearer
    parameter documents the scheme in the OpenAPI schema; the middleware has checked it."""
    principal: Principal = getattr(request.state, PRINCIPAL, OPEN)
    return principal


PrincipalDep = Annotated[Principal, Depends(authenticate)]


async def require_admin(principal: PrincipalDep) -> None:
    """Deleting tasks, cleanup and maintenance are for admin keys."""
    if principal.role != "admin":
        raise Forbidden("this needs an admin key", code=ErrorCode.ADMIN_KEY_REQUIRED)


async def require_unscoped(principal: PrincipalDep) -> None:
    """Views across tenants (statistics, jobs, candidates, metrics) are not for keys limited
    to some users or task sources."""
    if principal.scoped:
        raise Forbidden(
            "this key is limited to some tenants; this view spans all of them",
            code=ErrorCode.KEY_SCOPE_TOO_NARROW,
        )
