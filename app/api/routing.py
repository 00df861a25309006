"""The API's route class: request bodies parsed by orjson, and refused when they nest too deep,
are not declared as JSON or do not parse.

Python's json module accepts a lone UTF-16 surrogate ("\\ud800"), which no file or database
can store: such a body would fail at the write, a 500. orjson refuses it while parsing, so it
is a 422 `invalid_json` at the door, like any other malformed body.

A body nesting arrays and objects deeper than MAX_JSON_DEPTH is a 422 `json_too_deep` before
any dependency or endpoint runs: the serializers that store and render it (orjson, pydantic)
stop at a few hundred levels, so it would otherwise be accepted here and fail later, a 500.

For a route that takes a body, a body sent without ``Content-Type: application/json`` (or a
``+json`` type) is a 415 `unsupported_media_type` (FastAPI would hand it on as bytes, to fail as
"not a valid dictionary"), and one that does not parse is a 422 `invalid_json` saying where
and why (FastAPI says only "JSON decode error" at a byte offset).

An endpoint may have a fast lane (:func:`fast_lane`): a function given the checked request
first, which answers the requests it recognises and leaves the others to FastAPI.
"""

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute

from app.errors import InvalidJson, JsonTooDeep, UnsupportedMediaType
from app.json_depth import nests_deeper

# orjson's own parser refuses deeper documents with this message (its depth limit is 1024).
_ORJSON_DEPTH_ERROR = "depth limit exceeded"


class OrjsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())
        return self._json

    async def check_body(self, limit: int, *, takes_body: bool) -> None:
        """JsonTooDeep if the body is JSON nesting deeper than ``limit``; for a route that
        takes a body, UnsupportedMediaType if it is not declared as JSON and InvalidJson if it
        does not parse. An empty body passes (a route whose body is required says so)."""
        if not await self.body():
            return
        if takes_body and not is_json_type(self.headers.get("content-type", "")):
            declared = self.headers.get("content-type")
            raise UnsupportedMediaType(
                "the body must be JSON, sent with Content-Type: application/json "
                f"({f'not {declared}' if declared else 'no Content-Type was sent'})",
                details={"expected": "application/json", "content_type": declared},
            )
        try:
            parsed = await self.json()
        except orjson.JSONDecodeError as exc:
            if exc.msg == _ORJSON_DEPTH_ERROR:
                raise JsonTooDeep("the request body", limit) from None
            if takes_body:
                raise InvalidJson(exc.lineno, exc.colno, exc.msg) from None
            return
        if nests_deeper(parsed, limit):
            raise JsonTooDeep("the request body", limit)


def is_json_type(content_type: str) -> bool:
    """application/json or application/<anything>+json, parameters (charset) aside. (A type
    with a second "/" is none: FastAPI reads it as text/plain.)"""
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type.count("/") == 1 and (
        media_type == "application/json"
        or (media_type.startswith("application/") and media_type.endswith("+json"))
    )


Lane = Callable[[OrjsonRequest], Awaitable[Response | None]]
Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])

_LANE = "fast_lane"


def fast_lane(lane: Lane) -> Callable[[Endpoint], Endpoint]:
    """Give an endpoint a fast lane: ``lane`` gets each request (its body checked) before
    FastAPI does, and answers it or returns None to leave it to FastAPI.

    FastAPI solves a route's parameters and dependencies and validates its answer on every
    request: for an append that was more CPU than the store's commit. A lane answers only
    requests whose parameters are plainly valid, and does what the endpoint's dependencies and
    the endpoint do with them; anything else goes to FastAPI, so every refusal and every
    unusual spelling keeps FastAPI's answer."""

    def attach(endpoint: Endpoint) -> Endpoint:
        setattr(endpoint, _LANE, lane)
        return endpoint

    return attach


class OrjsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_body = self.body_field is not None
        lane: Lane | None = getattr(self.endpoint, _LANE, None)

        async def route(request: Request) -> Response:
            parsed = OrjsonRequest(request.scope, request.receive)
            limit = request.app.state.settings.limits.max_json_depth
            await parsed.check_body(limit, takes_body=takes_body)
            if lane is not None and (answer := await lane(parsed)) is not None:
                return answer
            return await handler(parsed)

        return route
