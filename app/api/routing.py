"""The API's route class: request bodies parsed by orjson, and refused when they nest too deep.

Python's json module accepts a lone UTF-16 surrogate ("\\ud800"), which no file or database
can store: such a body would fail at the write, a 500. orjson refuses it while parsing, so it
is a 422 `invalid_json` at the door, like any other malformed body.

A body nesting arrays and objects deeper than MAX_JSON_DEPTH is a 422 `json_too_deep` before
any dependency or endpoint runs: the serializers that store and render it (orjson, pydantic)
stop at a few hundred levels, so it would otherwise be accepted here and fail later, a 500.
"""

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute

from app.errors import JsonTooDeep
from app.json_depth import nests_deeper

# orjson's own parser refuses deeper documents with this message (its depth limit is 1024).
_ORJSON_DEPTH_ERROR = "depth limit exceeded"


class OrjsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())
        return self._json

    async def check_depth(self, limit: int) -> None:
        """JsonTooDeep if the body is JSON nesting deeper than ``limit``. A body that is not
        JSON passes: FastAPI answers it as it answers any malformed body."""
        if not await self.body():
            return
        try:
            parsed = await self.json()
        except orjson.JSONDecodeError as exc:
            if exc.msg == _ORJSON_DEPTH_ERROR:
                raise JsonTooDeep("the request body", limit) from None
            return
        if nests_deeper(parsed, limit):
            raise JsonTooDeep("the request body", limit)


class OrjsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            parsed = OrjsonRequest(request.scope, request.receive)
            await parsed.check_depth(request.app.state.settings.limits.max_json_depth)
            return await handler(parsed)

        return route
