"""The fast lanes as the tests watch them: which requests FastAPI solved the parameters of
(the others a lane answered), and answers compared as a client sees them."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import fastapi.routing
import httpx
import pytest
from fastapi import APIRouter
from fastapi.dependencies.utils import get_dependant, solve_dependencies

from app import routes
from app.auth.dependencies import BEARER

# A query parameter no route names: FastAPI ignores it, a lane leaves the request to FastAPI.
AS_FASTAPI = {"via": "fastapi"}

Setup = Callable[[], Awaitable[str]]  # makes a task; its uuid
Send = Callable[[str, dict[str, str]], Awaitable[httpx.Response]]  # (uuid, extra query)


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


def assert_lane_stands_for(
    endpoint: Callable[..., Any], path: str, router: APIRouter, dependencies: set[str]
) -> None:
    """The endpoint's dependencies are these (which its lane does too), its router adds none,
    and the API's routers are included with the bearer scheme alone (which only documents the
    key): a dependency added anywhere on the way fails here, for the lane would skip it."""
    dependant = get_dependant(path=path, call=endpoint)
    assert {sub.call.__name__ for sub in dependant.dependencies if sub.call} == dependencies
    assert router.dependencies == []
    assert [depends.dependency for depends in routes.API_DEPENDENCIES] == [BEARER]


async def both_ways(
    solved: list[str], setup: Setup, send: Send, path: str, headers: tuple[str, ...]
) -> tuple[Answer, Answer]:
    """``send`` to a task ``setup`` makes, as is; then to another it makes, with AS_FASTAPI in
    its query: the two answers, checked to have been the lane's and FastAPI's (by whether
    FastAPI solved ``path``, a template of ``{uuid}``)."""
    answers = []
    for extra in ({}, AS_FASTAPI):
        uuid = await setup()
        solved.clear()
        response = await send(uuid, extra)
        assert (path.format(uuid=uuid) in solved) == bool(extra), solved
        answers.append(Answer.of(response, uuid, headers))
    return answers[0], answers[1]
