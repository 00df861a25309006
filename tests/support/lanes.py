"""The fast lanes as the tests watch them: which requests FastAPI solved the parameters of
(the others a lane answered), and answers compared as a client sees them."""

from dataclasses import dataclass
from typing import Any

import fastapi.routing
import httpx
import pytest
from fastapi.dependencies.utils import solve_dependencies

# A query parameter no route names: FastAPI ignores it, a lane leaves the request to FastAPI.
AS_FASTAPI = {"via": "fastapi"}


def solved_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests FastAPI solves a route's parameters for, from now on."""
    paths: list[str] = []

    async def solve(**kwargs: Any) -> Any:
        paths.append(kwargs["request"].url.path)
        return await solve_dependencies(**kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", solve)
    return paths


@dataclass(frozen=True)
class Answer:
    """What a client sees of an answer (these headers), the task's uuid in it replaced by
    ``{uuid}``."""

    status: int
    body: bytes
    headers: dict[str, str | None]

    @classmethod
    def of(cls, response: httpx.Response, uuid: str, headers: tuple[str, ...]) -> "Answer":
        body = response.content.replace(uuid.encode(), b"{uuid}")
        seen = {name: response.headers.get(name) for name in headers}
        return cls(response.status_code, body, seen)
