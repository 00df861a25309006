"""The API's route class: request bodies parsed by orjson.

Python's json module accepts a lone UTF-16 surrogate ("\\ud800"), which no file or database
can store: such a body would fail at the write, a 500. orjson refuses it while parsing, so it
is a 422 `invalid_json` at the door, like any other malformed body.
"""

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute


class OrjsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())
        return self._json


class OrjsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(OrjsonRequest(request.scope, request.receive))

        return route
