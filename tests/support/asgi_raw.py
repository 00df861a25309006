"""Requests sent to an ASGI app as a server would pass them, paths exactly as given (httpx
normalises ``..`` away before sending)."""

import urllib.parse
from typing import Any

import httpx
import orjson
from fastapi import FastAPI
from starlette.types import Message, Scope


async def raw(
    app: FastAPI,
    method: str,
    raw_path: str,
    query: str = "",
    body: Any = None,
    *,
    content: bytes | None = None,
) -> httpx.Response:
    """A request with the path exactly as given, percent-escapes decoded as a server does.
    An app that raises is a 500 here, as it is to a client of uvicorn."""
    if content is None:
        content = b"" if body is None else orjson.dumps(body)
    headers = [(b"host", b"test"), (b"content-length", str(len(content)).encode())]
    if content:
        headers.append((b"content-type", b"application/json"))
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": urllib.parse.unquote(raw_path),
        "raw_path": raw_path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    sent: list[Message] = []
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if delivered:
            return {"type": "http.disconnect"}
        delivered = True
        return {"type": "http.request", "body": content, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    try:
        await app(scope, receive, send)
    except Exception as exc:  # what uvicorn's client would see: a 500
        return httpx.Response(500, text=f"the app raised {exc!r}")
    start_message = next(m for m in sent if m["type"] == "http.response.start")
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    response_headers = [(k.decode(), v.decode()) for k, v in start_message["headers"]]
    return httpx.Response(start_message["status"], headers=response_headers, content=payload)
