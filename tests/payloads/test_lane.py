"""The payload's fast lane: a plainly valid GET /request is answered without FastAPI's
parameter solving, and exactly as FastAPI answers it; any other request is FastAPI's.

Each case reads the payload of one task twice: as is, and with a query parameter the route
does not name (``via=fastapi``), which the lane leaves to FastAPI (tests/support/lanes.py).
"""

from typing import Any

import httpx
import pytest
from fastapi.dependencies.utils import get_dependant

from app.payloads.endpoints import get_request
from app.payloads.endpoints import router as payloads_router
from tests.support.conversations import READ_FILE_TOOL, function_call
from tests.support.errors import assert_error
from tests.support.lanes import AS_FASTAPI, Answer, solved_paths
from tests.support.tasks import append, create_task
from tests.support.threads import start

pytestmark = pytest.mark.database_agnostic

HEADERS = (
    "content-type",
    "content-length",
    "transfer-encoding",
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


async def conversation(client: httpx.AsyncClient) -> str:
    """A task with a system prompt, a tool and a call answered; its uuid."""
    uuid: str = (
        await create_task(client, system_prompt="You are a coding agent.", tools=[READ_FILE_TOOL])
    )["uuid"]
    await append(
        client,
        uuid,
        {"role": "user", "content": "Fix the bug in a.py"},
        {"role": "assistant", "content": None, "tool_calls": [function_call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "def main(): pass"},
    )
    return uuid


async def both_ways(
    client: httpx.AsyncClient, solved: list[str], uuid: str, params: dict[str, str]
) -> tuple[Answer, Answer]:
    """GET /request as is, then left to FastAPI: the answers, checked to have been the lane's
    and FastAPI's."""
    path = f"/tasks/{uuid}/request"
    solved.clear()
    lane = await client.get(path, params=params)
    assert solved == [], solved
    full = await client.get(path, params=params | AS_FASTAPI)
    assert solved == [path], solved
    return Answer.of(lane, uuid, HEADERS), Answer.of(full, uuid, HEADERS)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"format": "openai"},
        {"format": "lmstudio"},
        {"format": "anthropic"},
        {"format": "ollama"},
        {"thread_id": "0"},
        {"format": "anthropic", "thread_id": "0"},
    ],
    ids=["default", "openai", "lmstudio", "anthropic", "ollama", "root", "both"],
)
async def test_the_lane_serves_a_payload_as_fastapi_does(
    client: httpx.AsyncClient, solved: list[str], params: dict[str, str]
) -> None:
    uuid = await conversation(client)
    lane, full = await both_ways(client, solved, uuid, params)
    assert lane.status == 200, lane
    assert lane == full
    assert lane.headers["x-context-tokens"] is not None


async def test_the_lane_serves_a_threads_payload(
    client: httpx.AsyncClient, solved: list[str]
) -> None:
    uuid = await conversation(client)
    thread_id = (await start(client, uuid, label="fix"))["thread_id"]
    await append(client, uuid, {"role": "user", "content": "Read a.py"}, thread_id=thread_id)
    lane, full = await both_ways(client, solved, uuid, {"thread_id": str(thread_id)})
    assert lane.status == 200, lane
    assert lane == full
    assert lane.headers["x-thread-tokens"] is not None


@pytest.mark.parametrize(
    ("params", "status", "code"),
    [({"thread_id": "7"}, 404, "thread_not_found")],
    ids=["no_thread"],
)
async def test_the_lane_refuses_as_fastapi_does(
    client: httpx.AsyncClient, solved: list[str], params: dict[str, str], status: int, code: str
) -> None:
    uuid = await conversation(client)
    lane, full = await both_ways(client, solved, uuid, params)
    assert lane == full
    assert lane.status == status


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
    dependant = get_dependant(path="/tasks/{uuid}/request", call=get_request)
    assert {sub.call.__name__ for sub in dependant.dependencies if sub.call} == {
        "task_uuid",
        "get_payloads",
    }
    assert payloads_router.dependencies == []
