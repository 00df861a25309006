"""The append's fast lane: a plainly valid append is answered without FastAPI's parameter
solving, and exactly as FastAPI answers it; any other request is FastAPI's to answer.

Each case is sent twice, to two tasks made alike: once as is, and once with a query parameter
the route does not name (``via=fastapi``), which FastAPI ignores and the lane leaves to it
(tests/support/lanes.py).
"""

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from app.messages.endpoints import append_messages
from app.messages.endpoints import router as messages_router
from tests.support import lanes
from tests.support.errors import assert_error
from tests.support.files import snapshot_dir
from tests.support.lanes import AS_FASTAPI, Answer, Send, assert_lane_stands_for, solved_paths
from tests.support.tasks import create_task
from tests.support.threads import start

pytestmark = pytest.mark.database_agnostic

MESSAGE = {"role": "user", "content": "Fix the bug in a.py"}
ANTHROPIC_RESULT = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "ok"}],
}
ANTHROPIC_CALL = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "toolu_01A", "name": "run", "input": {"cmd": "ls"}}],
}
COMPARED_HEADERS = ("content-type", "content-length", "idempotent-replayed")


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(context_dir=context_dir, limits={"max_batch_messages": 3})


@pytest.fixture
def solved(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return solved_paths(monkeypatch)


async def both_ways(
    client: httpx.AsyncClient, solved: list[str], append: Send
) -> tuple[Answer, Answer]:
    """``append`` to a new task as is, then to another left to FastAPI (tests/support/lanes.py)."""

    async def setup() -> str:
        uuid: str = (await create_task(client, system_prompt="You are a coding agent."))["uuid"]
        return uuid

    return await lanes.both_ways(solved, setup, append, "/tasks/{uuid}/messages", COMPARED_HEADERS)


def poster(
    client: httpx.AsyncClient,
    body: Any,
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    times: int = 1,
) -> Send:
    """An append of ``body`` (sent ``times`` times: the last answer counts)."""

    async def append(uuid: str, extra: dict[str, str]) -> httpx.Response:
        for _ in range(times):
            answer = await client.post(
                f"/tasks/{uuid}/messages",
                json=body,
                params=(params or {}) | extra,
                headers=headers,
            )
        return answer

    return append


@pytest.mark.parametrize(
    ("body", "params", "headers", "times"),
    [
        (MESSAGE, None, None, 1),
        ({"messages": [MESSAGE, {"role": "assistant", "content": "Reading a.py"}]}, None, None, 1),
        (MESSAGE, None, {"Idempotency-Key": "step-1 (retry)"}, 1),
        (MESSAGE, None, {"Idempotency-Key": "step-1"}, 2),  # the replay
        (MESSAGE, {"thread_id": "0"}, None, 1),
        (ANTHROPIC_CALL, {"input": "anthropic"}, None, 1),
        (ANTHROPIC_CALL, None, None, 1),  # detected
        (MESSAGE, {"input": "openai", "thread_id": "0"}, {"Idempotency-Key": "k" * 200}, 1),
    ],
    ids=["one", "batch", "key", "replay", "root", "anthropic", "detected", "all_parameters"],
)
async def test_the_lane_answers_a_valid_append_as_fastapi_does(
    client: httpx.AsyncClient,
    solved: list[str],
    body: dict[str, Any],
    params: dict[str, str] | None,
    headers: dict[str, str] | None,
    times: int,
) -> None:
    lane, full = await both_ways(client, solved, poster(client, body, params, headers, times))
    assert lane.status == 201, lane
    assert lane == full
    assert (lane.headers["idempotent-replayed"] == "true") == (times > 1)


async def test_the_lane_appends_to_a_thread(client: httpx.AsyncClient, solved: list[str]) -> None:
    async def to_a_thread(uuid: str, extra: dict[str, str]) -> httpx.Response:
        thread_id = (await start(client, uuid, label="fix"))["thread_id"]
        solved.clear()
        params = {"thread_id": str(thread_id)} | extra
        return await client.post(f"/tasks/{uuid}/messages", json=MESSAGE, params=params)

    lane, full = await both_ways(client, solved, to_a_thread)
    assert lane.status == 201, lane
    assert lane == full


@pytest.mark.parametrize(
    ("body", "params", "status", "code"),
    [
        ({"content": "no role"}, None, 422, "validation_error"),
        ({"messages": [MESSAGE] * 4}, None, 413, "batch_too_large"),
        ([MESSAGE], None, 422, "validation_error"),
        (ANTHROPIC_RESULT, {"input": "ollama"}, 422, "validation_error"),
        (
            {"role": "tool", "tool_call_id": "call_9", "content": "ok"},
            None,
            422,
            "unknown_tool_call",
        ),
        (MESSAGE, {"thread_id": "7"}, 404, "thread_not_found"),
    ],
    ids=["invalid", "batch_too_large", "not_an_object", "foreign", "unpaired", "no_thread"],
)
async def test_the_lane_refuses_as_fastapi_does_and_writes_nothing(
    client: httpx.AsyncClient,
    solved: list[str],
    context_dir: Path,
    body: Any,
    params: dict[str, str] | None,
    status: int,
    code: str,
) -> None:
    refuse = poster(client, body, params)

    async def unwritten(uuid: str, extra: dict[str, str]) -> httpx.Response:
        before = snapshot_dir(context_dir)
        answer = await refuse(uuid, extra)
        assert snapshot_dir(context_dir) == before
        return answer

    lane, full = await both_ways(client, solved, unwritten)
    assert lane == full
    assert (lane.status, orjson.loads(lane.body)["error"]["code"]) == (status, code)


async def test_the_lane_refuses_an_unknown_task_as_fastapi_does(
    client: httpx.AsyncClient, solved: list[str], context_dir: Path
) -> None:
    uuid = "00000000-0000-4000-8000-000000000000"
    before = snapshot_dir(context_dir)
    lane = await client.post(f"/tasks/{uuid}/messages", json=MESSAGE)
    assert solved == []
    full = await client.post(f"/tasks/{uuid}/messages", json=MESSAGE, params=AS_FASTAPI)
    assert solved == [f"/tasks/{uuid}/messages"]
    assert_error(lane, 404, "task_not_found")
    assert Answer.of(lane, uuid, COMPARED_HEADERS) == Answer.of(full, uuid, COMPARED_HEADERS)
    assert snapshot_dir(context_dir) == before


@pytest.mark.parametrize(
    ("spelling", "status"),
    [
        ({"uuid": "upper"}, 201),
        ({"params": {"thread_id": "00"}}, 201),
        ({"params": {"thread_id": "-1"}}, 422),
        ({"params": {"thread_id": str(2**31)}}, 422),
        ({"params": {"input": "OpenAI"}}, 422),
        ({"params": {"input": ""}}, 422),
        ({"params": {"thread_id": ["0", "0"]}}, 201),
        ({"headers": [("Idempotency-Key", "k" * 201)]}, 422),
        ({"headers": [("Idempotency-Key", "")]}, 422),
        ({"headers": [("Idempotency-Key", "tab\there")]}, 422),
        ({"headers": [("Idempotency-Key", "a"), ("Idempotency-Key", "b")]}, 201),
        ({"body": b""}, 422),
    ],
    ids=[
        "upper_case_uuid",
        "leading_zero",
        "negative_thread",
        "thread_out_of_range",
        "input_in_other_case",
        "empty_input",
        "repeated_parameter",
        "long_key",
        "empty_key",
        "control_character_in_key",
        "two_keys",
        "empty_body",
    ],
)
async def test_any_other_append_is_fastapis_to_answer(
    client: httpx.AsyncClient, solved: list[str], spelling: dict[str, Any], status: int
) -> None:
    uuid = (await create_task(client))["uuid"]
    solved.clear()
    path = f"/tasks/{uuid.upper() if spelling.get('uuid') else uuid}/messages"
    content = spelling.get("body", b'{"role": "user", "content": "hi"}')
    answer = await client.post(
        path,
        content=content,
        params=spelling.get("params"),
        headers=[("Content-Type", "application/json"), *spelling.get("headers", [])],
    )
    assert answer.status_code == status, answer.text
    assert solved == [path]


async def test_a_key_the_lane_took_is_replayed_by_fastapi_and_back(
    client: httpx.AsyncClient, solved: list[str]
) -> None:
    uuid = (await create_task(client))["uuid"]
    url = f"/tasks/{uuid}/messages"
    key = {"Idempotency-Key": "step-7"}
    first = await client.post(url, json=MESSAGE, headers=key)
    again = await client.post(url, json=MESSAGE, headers=key, params=AS_FASTAPI)
    once_more = await client.post(url, json=MESSAGE, headers=key)
    assert solved == ["/tasks", url]  # the task's creation, and the second append
    assert first.status_code == again.status_code == once_more.status_code == 201
    assert first.json() == again.json() == once_more.json()
    assert [r.headers.get("idempotent-replayed") for r in (first, again, once_more)] == [
        None,
        "true",
        "true",
    ]


def test_the_lane_stands_for_every_dependency_of_the_append() -> None:
    """The lane does what these do (the task visible to the caller, the service; the routers'
    bearer scheme, app/routes.py, only documents the key): a dependency added to the append
    must be added to the lane too, or the lane would skip it."""
    dependencies = {"task_uuid", "get_messages"}
    assert_lane_stands_for(append_messages, "/tasks/{uuid}/messages", messages_router, dependencies)
