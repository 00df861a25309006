"""The payload's fast lane: a plainly valid GET /request is answered without FastAPI's
parameter solving, and exactly as FastAPI answers it; any other request is FastAPI's.

Each case reads the payload of one task twice: as is, and with a query parameter the route
does not name (``via=fastapi``), which the lane leaves to FastAPI (tests/support/lanes.py).
"""

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import httpx
import orjson
import pytest

from app.payloads.endpoints import get_request
from app.payloads.endpoints import router as payloads_router
from tests.support import lanes
from tests.support.conversations import READ_FILE_TOOL, function_call
from tests.support.errors import assert_error
from tests.support.lanes import AS_FASTAPI, Answer, Setup, assert_lane_stands_for, solved_paths
from tests.support.tasks import append, create_task
from tests.support.threads import start

pytestmark = pytest.mark.database_agnostic

HEADERS = (
    "content-type",
    "content-length",
    "x-context-tokens",
    "x-context-budget",
    "x-token-counter",
    "x-token-calibration",
    "x-thread-tokens",
    "x-thread-budget",
    "x-protected-tokens",
)


@pytest.fixture
def solved(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return solved_paths(monkeypatch)


# Long enough that a payload streams (over 64 KiB) rather than going as one body.
LONG_TEXT = "the parser test fails after the refactor of the tokenizer; " * 40


async def conversation(client: httpx.AsyncClient, *, turns: int = 1, text: str = "a.py") -> str:
    """A task with a system prompt, a tool and ``turns`` user turns, each answered by a call
    and its result (``text`` in them); its uuid."""
    uuid: str = (
        await create_task(client, system_prompt="You are a coding agent.", tools=[READ_FILE_TOOL])
    )["uuid"]
    for turn in range(turns):
        call = f"call_{turn}"
        await append(
            client,
            uuid,
            {"role": "user", "content": f"Fix the bug in {text}"},
            {"role": "assistant", "content": None, "tool_calls": [function_call(call)]},
            {"role": "tool", "tool_call_id": call, "content": f"def main(): {text}"},
        )
    return uuid


async def both_ways(
    client: httpx.AsyncClient, solved: list[str], setup: Setup, params: dict[str, str]
) -> tuple[Answer, Answer]:
    """GET /request of a task ``setup`` makes, as is; then of another, left to FastAPI (each
    the first read of its task; tests/support/lanes.py)."""

    async def read(uuid: str, extra: dict[str, str]) -> httpx.Response:
        return await client.get(f"/tasks/{uuid}/request", params=params | extra)

    return await lanes.both_ways(solved, setup, read, "/tasks/{uuid}/request", HEADERS)


@pytest.mark.parametrize(
    ("params", "turns"),
    [
        ({}, 1),
        ({"format": "openai"}, 1),
        ({"format": "lmstudio"}, 1),
        ({"format": "anthropic"}, 1),
        ({"format": "ollama"}, 1),
        ({"thread_id": "0"}, 1),
        ({"format": "anthropic", "thread_id": "0"}, 1),
        ({}, 30),
        ({"format": "anthropic"}, 30),
    ],
    ids=[
        "default",
        "openai",
        "lmstudio",
        "anthropic",
        "ollama",
        "root",
        "both",
        "streamed",
        "streamed_anthropic",
    ],
)
async def test_the_lane_serves_a_payload_as_fastapi_does(
    client: httpx.AsyncClient, solved: list[str], params: dict[str, str], turns: int
) -> None:
    async def setup() -> str:
        return await conversation(client, turns=turns, text=LONG_TEXT if turns > 1 else "a.py")

    lane, full = await both_ways(client, solved, setup, params)
    assert lane.status == 200, lane
    assert lane == full
    assert lane.headers["x-context-tokens"] is not None
    assert (lane.headers["content-length"] is None) == (turns > 1)  # streamed: no length


async def test_the_lane_serves_a_threads_payload(
    client: httpx.AsyncClient, solved: list[str]
) -> None:
    async def setup() -> str:
        uuid = await conversation(client)
        thread_id = (await start(client, uuid, label="fix"))["thread_id"]
        await append(client, uuid, {"role": "user", "content": "Read a.py"}, thread_id=thread_id)
        return uuid

    lane, full = await both_ways(client, solved, setup, {"thread_id": "1"})
    assert lane.status == 200, lane
    assert lane == full
    assert lane.headers["x-thread-tokens"] is not None


async def test_the_lane_refuses_as_fastapi_does(
    client: httpx.AsyncClient, solved: list[str]
) -> None:
    async def empty(client: httpx.AsyncClient) -> str:
        uuid: str = (await create_task(client))["uuid"]
        return uuid

    cases: list[tuple[Callable[[httpx.AsyncClient], Awaitable[str]], dict[str, str], int, str]]
    cases = [
        (conversation, {"thread_id": "7"}, 404, "thread_not_found"),
        (empty, {}, 409, "context_empty"),
    ]
    for setup, params, status, code in cases:
        lane, full = await both_ways(client, solved, partial(setup, client), params)
        assert lane == full
        assert (lane.status, orjson.loads(lane.body)["error"]["code"]) == (status, code)


async def test_the_lane_refuses_an_unknown_task_as_fastapi_does(
    client: httpx.AsyncClient, solved: list[str]
) -> None:
    uuid = "00000000-0000-4000-8000-000000000000"
    lane = await client.get(f"/tasks/{uuid}/request")
    full = await client.get(f"/tasks/{uuid}/request", params=AS_FASTAPI)
    assert solved == [f"/tasks/{uuid}/request"]
    assert_error(lane, 404, "task_not_found")
    assert Answer.of(lane, uuid, HEADERS) == Answer.of(full, uuid, HEADERS)


@pytest.mark.parametrize(
    ("spelling", "status"),
    [
        ({"uuid": "upper"}, 200),
        ({"params": {"thread_id": "00"}}, 200),
        ({"params": {"thread_id": "-1"}}, 422),
        ({"params": {"format": "OpenAI"}}, 422),
        ({"params": {"format": ""}}, 422),
        ({"params": {"format": ["openai", "ollama"]}}, 200),
    ],
    ids=[
        "upper_case_uuid",
        "leading_zero",
        "negative_thread",
        "format_in_other_case",
        "empty_format",
        "repeated_parameter",
    ],
)
async def test_any_other_request_is_fastapis_to_answer(
    client: httpx.AsyncClient, solved: list[str], spelling: dict[str, Any], status: int
) -> None:
    uuid = await conversation(client)
    path = f"/tasks/{uuid.upper() if spelling.get('uuid') else uuid}/request"
    solved.clear()
    answer = await client.get(path, params=spelling.get("params"))
    assert answer.status_code == status, answer.text
    assert solved == [path]


def test_the_lane_stands_for_every_dependency_of_the_request() -> None:
    """The lane does what these do (the task visible to the caller; the service): a dependency
    added to the endpoint must be added to the lane too, or the lane would skip it."""
    dependencies = {"task_uuid", "get_payloads"}
    assert_lane_stands_for(get_request, "/tasks/{uuid}/request", payloads_router, dependencies)
