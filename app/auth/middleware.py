"""Authentication before anything else: no body is read, parsed or validated for a caller
without a valid key (a 422 would tell an unknown caller what the API expects).

The ops page (/ui) is for browsers, which send no key header: there, and only there, the
session cookie its login form sets stands for an admin key (app/auth/sessions.py).
"""

import time
from collections.abc import Mapping
from http.cookies import CookieError, SimpleCookie

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth import sessions
from app.auth.keys import Principal, identify
from app.config import ApiKeyConfig
from app.errors import Unauthorized, error_payload

PUBLIC_PATHS = frozenset({"/", "/healthz", "/readyz"})
PRINCIPAL = "principal"  # where the caller is kept in the request's state
UI_PREFIX = "/ui"
UI_LOGIN = "/ui/login"
UI_STATIC = "/ui/static/"  # stylesheet and script: nothing in them is secret


def is_ui(path: str) -> bool:
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


class AuthMiddleware:
    """With keys configured, answers 401 unless ``Authorization: Bearer <key>`` or
    ``x-api-key: <key>`` (what Anthropic's SDK sends) names one; the caller's principal goes
    into the request state for the routes' role and scope checks."""

    def __init__(self, app: ASGIApp, keys: Mapping[str, ApiKeyConfig]) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if not path or not self.keys or path in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        bearer = [value for name, value in scope["headers"] if name == b"authorization"]
        plain = [value for name, value in scope["headers"] if name == b"x-api-key"]
        if is_ui(path) and not bearer and not plain:
            await self._ui(scope, receive, send)
            return
        if len(bearer) + len(plain) > 1:  # which one counts would depend on who reads
            await _unauthorized(send, "send one key: one Authorization or one x-api-key header")
            return
        if plain:
            principal = self._identified(plain[0].decode("latin-1").strip())
        else:
            principal = self._principal(bearer[0] if bearer else b"")
        if isinstance(principal, str):
            await _unauthorized(send, principal)
            return
        scope.setdefault("state", {})[PRINCIPAL] = principal
        await self.app(scope, receive, send)

    async def _ui(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A browser on the ops page: the login form and the assets are open, the rest needs
        a session (pages are sent to the form)."""
        path = scope["path"]
        if path == UI_LOGIN or path.startswith(UI_STATIC):
            await self.app(scope, receive, send)
            return
        principal = sessions.verify(self.keys, _session(scope), time.time())
        if principal is not None:
            scope.setdefault("state", {})[PRINCIPAL] = principal
            await self.app(scope, receive, send)
        elif scope["method"] in ("GET", "HEAD"):
            await _see_other(send, UI_LOGIN)
        else:
            await _unauthorized(send, "log in at /ui/login with an admin key")

    def _principal(self, header: bytes) -> Principal | str:
        """The caller, or why there is none."""
        scheme, _, token = header.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return "an API key is needed: Authorization: Bearer <key> (or x-api-key: <key>)"
        return self._identified(token.strip())

    def _identified(self, token: str) -> Principal | str:
        if not token:
            return "an API key is needed: Authorization: Bearer <key> (or x-api-key: <key>)"
        return identify(self.keys, token) or "the API key is not known"


async def _unauthorized(send: Send, message: str) -> None:
    refusal = Unauthorized(message)
    body = orjson.dumps(error_payload(refusal.code, refusal.message))
    headers = [(k.lower().encode(), v.encode()) for k, v in (refusal.headers or {}).items()]
    await send(
        {
            "type": "http.response.start",
            "status": refusal.status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _session(scope: Scope) -> str:
    """The session cookie's value ("" if none, or the Cookie header does not parse)."""
    jar: SimpleCookie = SimpleCookie()
    for name, value in scope["headers"]:
        if name == b"cookie":
            try:
                jar.load(value.decode("latin-1"))
            except CookieError:
                return ""
    morsel = jar.get(sessions.COOKIE)
    return morsel.value if morsel is not None else ""


async def _see_other(send: Send, location: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [(b"location", location.encode()), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})
