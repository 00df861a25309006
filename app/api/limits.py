"""Limits enforced before the application sees (or stores) anything: the body's size and the
time its reading may take, and query strings a database can compare.

Starlette's own RequestBodyLimitMiddleware answers a declared oversized body in plain text,
which would break the API's one error shape; this one answers in that shape.
"""

import asyncio
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import ErrorCode, error_payload


class BodyLimitMiddleware:
    """Answers 413 for bodies over ``max_bytes``, by Content-Length or as they stream in, and
    408 (closing the connection) for a body not whole ``read_timeout_s`` after the headers:
    neither uvicorn nor h11 bounds that time, and a client that stalls mid-body would hold its
    connection for ever.

    The body is buffered up to the limit (the JSON parser needs it whole anyway) and handed
    to the application only when it fits.

    A refused body is read to its end and dropped before the 413 is sent (a lingering close),
    up to ``discard_bytes`` in all and ``discard_timeout_s`` after the refusal: closing on
    unread bytes makes the kernel reset the connection, and a client still sending (httpx's
    async client, so the openai SDK's AsyncOpenAI) reports the reset, not the 413. Past those
    bounds the 413 goes out with a close at once. The 413 must come after the drain: once a
    response is complete uvicorn hands the application no more of the body.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        read_timeout_s: float,
        discard_bytes: int,
        discard_timeout_s: float,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout_s = read_timeout_s
        self.discard_bytes = discard_bytes
        self.discard_timeout_s = discard_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            # A client waiting for 100 Continue has sent none of it (reading would invite it
            # all), and a body past the drain's bound would be cut off anyway: refuse at once.
            waiting = b"100-continue" in headers.get(b"expect", b"").lower()
            if waiting or int(declared) > self.discard_bytes:
                await self._reject(send, close=True)
            else:
                await self._reject_after_draining(receive, send, 0)
            return
        try:
            async with asyncio.timeout(self.read_timeout_s):
                read = await self._read(receive)
        except TimeoutError:
            await self._timed_out(send)
            return
        if read is None:  # the client left
            return
        body, more = read
        if len(body) > self.max_bytes:
            if more:
                await self._reject_after_draining(receive, send, len(body))
            else:
                await self._reject(send, close=False)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> tuple[bytes, bool] | None:
        """The whole body, or its first bytes past the limit, and whether more is coming;
        None if the client left."""
        chunks: list[bytes] = []
        size = 0
        more = True
        while more and size <= self.max_bytes:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
        return b"".join(chunks), more

    async def _reject_after_draining(self, receive: Receive, send: Send, size: int) -> None:
        """The 413 once the rest of the body (``size`` bytes of it read so far) is read and
        dropped; with a close if the drain's bounds cut it short, nothing if the client left."""
        try:
            async with asyncio.timeout(self.discard_timeout_s):
                while size <= self.discard_bytes:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    size += len(message.get("body", b""))
                    if not message.get("more_body", False):
                        # All read: the connection can serve the client's next request.
                        await self._reject(send, close=False)
                        return
        except TimeoutError:
            pass
        await self._reject(send, close=True)

    async def _timed_out(self, send: Send) -> None:
        payload = error_payload(
            ErrorCode.BODY_READ_TIMEOUT,
            f"the request body did not arrive whole within {self.read_timeout_s:g} s; "
            "nothing was done",
            {"timeout_s": self.read_timeout_s},
        )
        await send_error(send, 408, payload, close=True)

    async def _reject(self, send: Send, *, close: bool) -> None:
        payload = error_payload(
            ErrorCode.BODY_TOO_LARGE,
            f"the request body exceeds {self.max_bytes} bytes",
            {"limit": self.max_bytes},
        )
        await send_error(send, 413, payload, close=close)


class NulQueryMiddleware:
    """Answers 422 for a query string holding a NUL character (%00): query parameters are
    compared with database columns, and PostgreSQL's text refuses NUL (a 500 otherwise)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and b"%00" in scope.get("query_string", b""):
            message = "the query string holds a NUL character (%00)"
            await send_error(
                send, 422, error_payload(ErrorCode.INVALID_CHARACTER, message), close=False
            )
            return
        await self.app(scope, receive, send)


async def send_error(send: Send, status: int, payload: dict[str, Any], *, close: bool) -> None:
    """An error in the API's one shape, answered by a middleware (``close``: the body was not
    read, so the connection cannot be reused)."""
    body = orjson.dumps(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
