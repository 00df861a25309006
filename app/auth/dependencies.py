"""Authentication and authorisation as FastAPI dependencies (applied in app/main.py)."""

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.auth.keys import OPEN, Principal, identify
from app.config import Settings
from app.errors import Forbidden, Unauthorized

_BEARER = HTTPBearer(auto_error=False, description="An API key from API_KEYS (when set).")


def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
) -> Principal:
    """The caller, from ``Authorization: Bearer <key>``; every caller when no keys are set."""
    settings: Settings = request.app.state.settings
    if not settings.api_keys:
        return OPEN
    if credentials is None or not credentials.credentials.strip():
        raise Unauthorized("an API key is needed: Authorization: Bearer <key>")
    principal = identify(settings.api_keys, credentials.credentials.strip())
    if principal is None:
        raise Unauthorized("the API key is not known")
    return principal


PrincipalDep = Annotated[Principal, Depends(authenticate)]


def require_admin(principal: PrincipalDep) -> None:
    """Deleting tasks, cleanup and maintenance are for admin keys."""
    if principal.role != "admin":
        raise Forbidden("this needs an admin key", code="admin_key_required")


def require_unscoped(principal: PrincipalDep) -> None:
    """Views across tenants (statistics, jobs, candidates, metrics) are not for keys limited
    to some users or task sources."""
    if principal.scoped:
        raise Forbidden(
            "this key is limited to some tenants; this view spans all of them",
            code="key_scope_too_narrow",
        )
