"""Authentication and authorisation as FastAPI dependencies (applied in app/main.py); all
coroutines, so that FastAPI does not hand them to a worker thread."""

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from app.auth.keys import OPEN, Principal
from app.auth.middleware import PRINCIPAL
from app.errors import ErrorCode, Forbidden

# FastAPI solves every dependency a route names in full on each request, a cached one
# included (~0.1 ms each here): so the bearer scheme is a dependency of the routers alone,
# for the OpenAPI schema, and the caller's principal is read without it.
BEARER = HTTPBearer(auto_error=False, description="An API key from API_KEYS (when set).")


def principal_of(request: Request) -> Principal:
    """The caller, as AuthMiddleware found it (every caller when no keys are set)."""
    principal: Principal = getattr(request.state, PRINCIPAL, OPEN)
    return principal


async def authenticate(request: Request) -> Principal:
    """The caller, for a route that needs it (the middleware has checked the key)."""
    return principal_of(request)


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
