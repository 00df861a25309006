"""Bad input gets the right 4xx in the one error shape, and changes nothing (SPEC §3.8).

"Changes nothing" is checked three ways for every case: the bytes of every file under CONTEXT_DIR
(``snapshot_dir``), every directory under it, and the task as the API reports it (the whole
GET /tasks/{uuid} body: status, statistics, context head, timestamps). Create errors also check
that no task appeared in GET /tasks and no directory for the uuid exists in any location.

The module runs with small size limits so the 413 cases stay cheap: MAX_BODY_BYTES 64 KiB,
MAX_MESSAGE_BYTES 16 KiB, MAX_BATCH_MESSAGES 10.
"""

import uuid as uuid_module
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI

from app.config import Settings
from tests.conftest import snapshot_dir, task_body
from tests.support.asgi_raw import raw
from tests.support.waits import settled_jobs

KiB = 1024
MAX_BODY = 64 * KiB
MAX_MESSAGE = 16 * KiB
MAX_BATCH = 10
LOCATIONS = ("running", "paused", "completed", ".staging", ".trash")

Client = httpx.AsyncClient


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """Shadows conftest's settings: the default ones with small size limits."""
    return Settings(
        context_dir=context_dir,
        max_body_bytes=MAX_BODY,
        max_message_bytes=MAX_MESSAGE,
        max_batch_messages=MAX_BATCH,
    )


# -- helpers -------------------------------------------------------------------------------------


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The answer has ``status`` and exactly the one error shape (and ``code``, if given)."""
    assert response.status_code == status, response.text[:2000]
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert isinstance(error["code"], str)
    assert error["code"]
    assert isinstance(error["message"], str)
    assert error["message"]
    assert isinstance(error["details"], dict)
    if code is not None:
        assert error["code"] == code, error
    return error


def directories(root: Path) -> set[str]:
    """Every directory under root (snapshot_dir sees files only, not an empty new directory)."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()}


async def task_uuids(client: Client) -> list[str]:
    response = await client.get("/tasks", params={"limit": 1000})
    assert response.status_code == 200
    return [t["uuid"] for t in response.json()["tasks"]]


async def state(client: Client, context_dir: Path, uuid: str | None = None) -> dict[str, Any]:
    """Everything a bad request must leave alone (once the task's background work is done)."""
    if uuid is not None:
        await settled_jobs(client, uuid, at_least_one=False)  # a final summary...
    snapshot: dict[str, Any] = {
        "files": snapshot_dir(context_dir),
        "dirs": directories(context_dir),
        "tasks": await task_uuids(client),
    }
    if uuid is not None:
        response = await client.get(f"/tasks/{uuid}")
        assert response.status_code == 200
        snapshot["task"] = response.json()
    return snapshot


def assert_unchanged(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Two ``state`` snapshots agree: same directories, file bytes, task list and task."""
    assert after["dirs"] == before["dirs"]
    assert after["files"].keys() == before["files"].keys()
    for name, data in before["files"].items():
        assert after["files"][name] == data, f"{name} changed"
    assert after["tasks"] == before["tasks"]
    if "task" in before:
        assert after["task"]["context"] == before["task"]["context"]
        assert after["task"]["statistics"] == before["task"]["statistics"]
        assert after["task"] == before["task"]


async def create(client: Client, **overrides: Any) -> dict[str, Any]:
    response = await client.post("/tasks", json=task_body(**overrides))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def user(text: str = "Fix the bug in a.py") -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool_call(call_id: str = "call_1", arguments: Any = '{"path": "a.py"}') -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "read_file", "arguments": arguments},
            }
        ],
    }


def tool_result(call_id: str = "call_1", text: str = "def main(): ...") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


# -- message bodies --------------------------------------------------------------------------------

BAD_MESSAGES: dict[str, tuple[Any, int, str]] = {
    "unknown_role": ({"role": "human", "content": "hi"}, 422, "validation_error"),
    "tool_without_tool_call_id": ({"role": "tool", "content": "x"}, 422, "validation_error"),
    "tool_answering_unknown_call": (tool_result("call_nope"), 422, "unknown_tool_call"),
    "assistant_without_content_or_calls": ({"role": "assistant"}, 422, "validation_error"),
    "assistant_null_content_no_calls": (
        {"role": "assistant", "content": None},
        422,
        "validation_error",
    ),
    "assistant_empty_tool_calls": (
        {"role": "assistant", "content": None, "tool_calls": []},
        422,
        "validation_error",
    ),
    "arguments_as_object": (tool_call(arguments={"path": "a.py"}), 422, "validation_error"),
    "user_without_content": ({"role": "user"}, 422, "validation_error"),
    "tool_calls_on_user": (
        {**user(), "tool_calls": tool_call()["tool_calls"]},
        422,
        "validation_error",
    ),
    "batch_bad_role_in_middle": (
        {"messages": [user("one"), {"role": "human", "content": "two"}, user("three")]},
        422,
        "validation_error",
    ),
    "batch_unknown_tool_call_in_middle": (
        {"messages": [user("one"), tool_result("call_nope"), user("three")]},
        422,
        "unknown_tool_call",
    ),
    "batch_call_then_user": (
        {"messages": [user("one"), tool_call(), user("interrupts")]},
        409,
        "tool_results_pending",
    ),
    "batch_too_large_message_in_middle": (
        {"messages": [user("one"), user("x" * (MAX_MESSAGE + 1)), user("three")]},
        413,
        "message_too_large",
    ),
    "envelope_field_seq": ({**user(), "seq": 99}, 422, "reserved_field"),
    "envelope_field_tokens": ({**user(), "tokens": 1}, 422, "reserved_field"),
    "envelope_field_format_tokens": (
        {**user(), "format_tokens": {"anthropic": 1}},
        422,
        "reserved_field",
    ),
    "marker_field": ({**user(), "marker": "rewind", "to_seq": 1}, 422, "reserved_field"),
    "usage_on_a_user_message": ({**user(), "usage": {"prompt_tokens": 5}}, 422, "validation_error"),
    "usage_negative_input_tokens": (
        {"role": "assistant", "content": "ok", "usage": {"input_tokens": -5}},
        422,
        "validation_error",
    ),
    "usage_prompt_eval_count_not_a_number": (
        {"role": "assistant", "content": "ok", "usage": {"prompt_eval_count": "many"}},
        422,
        "validation_error",
    ),
    "empty_batch": ({"messages": []}, 422, "validation_error"),
    "batch_not_a_list": ({"messages": user()}, 422, "validation_error"),
    "not_an_object": ([user()], 422, "validation_error"),
}


@pytest.mark.parametrize("case", BAD_MESSAGES)
async def test_bad_message_body(
    client: Client, context_dir: Path, task: dict[str, Any], case: str
) -> None:
    """Each bad message or batch is refused with its status and code; no part of it is written."""
    body, status, code = BAD_MESSAGES[case]
    uuid = task["uuid"]
    before = await state(client, context_dir, uuid)
    assert_error(await client.post(f"/tasks/{uuid}/messages", json=body), status, code)
    assert_unchanged(before, await state(client, context_dir, uuid))


OPEN_CALL_CASES: dict[str, tuple[Any, int, str]] = {
    "user_while_calls_open": (user("what now?"), 409, "tool_results_pending"),
    "assistant_while_calls_open": (
        {"role": "assistant", "content": "done"},
        409,
        "tool_results_pending",
    ),
    "system_while_calls_open": ({"role": "system", "content": "x"}, 409, "tool_results_pending"),
    "result_for_another_call": (tool_result("call_2"), 422, "unknown_tool_call"),
    "batch_answers_then_interrupts": (
        {
            "messages": [
                tool_result("call_1"),
                tool_result("call_1b"),
                user("next"),
                tool_result("call_3"),
            ]
        },
        422,
        "unknown_tool_call",
    ),
    "batch_answers_one_of_two_then_user": (
        {"messages": [tool_result("call_1"), user("next")]},
        409,
        "tool_results_pending",
    ),
}


@pytest.mark.parametrize("case", OPEN_CALL_CASES)
async def test_bad_message_while_tool_calls_open(
    client: Client, context_dir: Path, task: dict[str, Any], case: str
) -> None:
    """With assistant tool calls open, only their results may follow; anything else is refused."""
    uuid = task["uuid"]
    two_calls = tool_call("call_1")
    two_calls["tool_calls"].append({**tool_call("call_1b")["tool_calls"][0]})
    response = await client.post(f"/tasks/{uuid}/messages", json=two_calls)
    assert response.status_code == 201, response.text
    body, status, code = OPEN_CALL_CASES[case]
    before = await state(client, context_dir, uuid)
    assert_error(await client.post(f"/tasks/{uuid}/messages", json=body), status, code)
    assert_unchanged(before, await state(client, context_dir, uuid))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"role": "user", "content": "unterminated',
        b'{"role": "user", "content": "x",}',
        b"\xff\xfe not json",
        b"",
    ],
    ids=["unterminated", "trailing_comma", "not_utf8", "empty"],
)
async def test_malformed_json(
    client: Client, context_dir: Path, task: dict[str, Any], raw: bytes
) -> None:
    """A body that is not JSON is refused as invalid_json and nothing is written."""
    uuid = task["uuid"]
    before = await state(client, context_dir, uuid)
    response = await client.post(
        f"/tasks/{uuid}/messages", content=raw, headers={"content-type": "application/json"}
    )
    error = assert_error(response, 422)
    # An empty body is a missing body, not broken JSON; every other case is broken JSON.
    assert error["code"] == ("validation_error" if raw == b"" else "invalid_json")
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_refused_append_keeps_updated_at(client: Client, task: dict[str, Any]) -> None:
    """A refused append leaves the task row entirely alone, updated_at included (SPEC §3.8)."""
    uuid = task["uuid"]
    before = (await client.get(f"/tasks/{uuid}")).json()
    response = await client.post(f"/tasks/{uuid}/messages", json=tool_result("call_nope"))
    assert_error(response, 422, "unknown_tool_call")
    after = (await client.get(f"/tasks/{uuid}")).json()
    assert after["updated_at"] == before["updated_at"]


# -- paths and unknown tasks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/tasks/not-a-uuid/messages", 422, "validation_error"),
        ("/tasks/%2e%2e/messages", 422, "validation_error"),  # decoded to ".." by the server
        ("/tasks/..%2F..%2Fetc/messages", 404, "not_found"),  # decoded: no route matches
        ("/tasks/550e8400-e29b-41d4-a716-44665544000/messages", 422, "validation_error"),
        ("/tasks/550e8400-e29b-41d4-a716-446655440000x/messages", 422, "validation_error"),
    ],
    ids=["not_a_uuid", "encoded_dotdot", "encoded_traversal", "short_uuid", "uuid_plus_junk"],
)
async def test_non_uuid_path_via_httpx(
    client: Client, context_dir: Path, task: dict[str, Any], path: str, status: int, code: str
) -> None:
    """A task path that is not a uuid is a 4xx JSON error and touches no file."""
    before = await state(client, context_dir, task["uuid"])
    assert_error(await client.post(path, json=user()), status, code)
    assert_unchanged(before, await state(client, context_dir, task["uuid"]))


@pytest.mark.parametrize(
    ("raw_path", "status", "code"),
    [
        (b"/tasks/../etc/messages", 404, "not_found"),
        (b"/tasks/../messages", 422, "validation_error"),
        (b"/tasks/../../running/messages", 404, "not_found"),
    ],
)
async def test_traversal_path_sent_raw(
    app: FastAPI,
    client: Client,
    context_dir: Path,
    task: dict[str, Any],
    raw_path: bytes,
    status: int,
    code: str,
) -> None:
    """A literal ``..`` path reaching the app is a 4xx JSON error and touches no file."""
    before = await state(client, context_dir, task["uuid"])
    assert_error(await raw(app, "POST", raw_path.decode(), body=user()), status, code)
    assert_unchanged(before, await state(client, context_dir, task["uuid"]))


UNKNOWN_TASK_CALLS: dict[str, tuple[str, str, Any]] = {
    "get": ("GET", "", None),
    "append": ("POST", "/messages", user()),
    "history": ("GET", "/messages", None),
    "request": ("GET", "/request", None),
    "context": ("GET", "/context", None),
    "tools": ("POST", "/tools", {"tool": "read_file", "args": {}}),
    "planning": ("POST", "/planning", {"plan_type": "initial", "plan_content": "1. a"}),
    "complete": ("POST", "/complete", None),
    "fail": ("POST", "/fail", {"error_message": "boom"}),
    "delete": ("DELETE", "", None),
}


@pytest.mark.parametrize("call", UNKNOWN_TASK_CALLS)
async def test_unknown_task(
    client: Client, context_dir: Path, task: dict[str, Any], call: str
) -> None:
    """Any call on a well-formed but unknown uuid is 404 task_not_found and creates nothing."""
    method, suffix, body = UNKNOWN_TASK_CALLS[call]
    unknown = str(uuid_module.uuid4())
    before = await state(client, context_dir, task["uuid"])
    response = await client.request(method, f"/tasks/{unknown}{suffix}", json=body)
    error = assert_error(response, 404, "task_not_found")
    assert error["details"]["uuid"] == unknown
    assert_unchanged(before, await state(client, context_dir, task["uuid"]))
    assert not any((context_dir / loc / unknown).exists() for loc in LOCATIONS)


# -- writes to a task that is not running ----------------------------------------------------------

WRITES: dict[str, tuple[str, Any]] = {
    "message": ("/messages", user()),
    "batch": ("/messages", {"messages": [user("a"), user("b")]}),
    "tools": ("/tools", {"tool": "read_file", "args": {"path": "a.py"}, "result": "x"}),
    "planning": ("/planning", {"plan_type": "initial", "plan_content": "1. Read a.py"}),
}


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize(
    ("action", "body"),
    [("complete", None), ("fail", {"error_message": "boom"}), ("stop", None)],
    ids=["completed", "failed", "paused"],
)
async def test_write_to_non_running_task(
    client: Client,
    context_dir: Path,
    task: dict[str, Any],
    write: str,
    action: str,
    body: Any,
) -> None:
    """Messages, tool records and planning entries to a finished or paused task are refused."""
    uuid = task["uuid"]
    response = await client.post(f"/tasks/{uuid}/{action}", json=body)
    assert response.status_code == 200, response.text
    before = await state(client, context_dir, uuid)
    suffix, payload = WRITES[write]
    error = assert_error(
        await client.post(f"/tasks/{uuid}{suffix}", json=payload), 409, "task_not_writable"
    )
    assert error["details"]["status"] == before["task"]["status"]
    assert_unchanged(before, await state(client, context_dir, uuid))


# -- size limits -----------------------------------------------------------------------------------


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize("declared", [True, False], ids=["content_length", "streamed"])
async def test_body_too_large(
    client: Client, context_dir: Path, task: dict[str, Any], declared: bool
) -> None:
    """A 100 KiB body over a 64 KiB limit is 413 body_too_large, declared or streamed."""
    uuid = task["uuid"]
    data = orjson.dumps(user("x" * (100 * KiB)))
    assert len(data) > MAX_BODY
    before = await state(client, context_dir, uuid)
    headers = {"content-type": "application/json"}
    content: bytes | AsyncIterator[bytes] = data if declared else _chunks(data, 8 * KiB)
    response = await client.post(f"/tasks/{uuid}/messages", content=content, headers=headers)
    error = assert_error(response, 413, "body_too_large")
    assert error["details"]["limit"] == MAX_BODY
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_body_too_large_on_create(client: Client, context_dir: Path) -> None:
    """The body limit holds for every endpoint: an oversized create makes no task."""
    before = await state(client, context_dir)
    body = task_body(uuid=str(uuid_module.uuid4()), system_prompt="x" * (100 * KiB))
    assert_error(await client.post("/tasks", json=body), 413, "body_too_large")
    assert_unchanged(before, await state(client, context_dir))


async def test_message_too_large(client: Client, context_dir: Path, task: dict[str, Any]) -> None:
    """One message over MAX_MESSAGE_BYTES (in a body under MAX_BODY_BYTES) is 413."""
    uuid = task["uuid"]
    body = user("x" * (2 * MAX_MESSAGE))
    assert len(orjson.dumps(body)) < MAX_BODY
    before = await state(client, context_dir, uuid)
    error = assert_error(
        await client.post(f"/tasks/{uuid}/messages", json=body), 413, "message_too_large"
    )
    assert error["details"]["limit"] == MAX_MESSAGE
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_batch_too_large(client: Client, context_dir: Path, task: dict[str, Any]) -> None:
    """A batch of MAX_BATCH_MESSAGES + 1 is 413; a batch of exactly the limit is accepted."""
    uuid = task["uuid"]
    before = await state(client, context_dir, uuid)
    too_many = {"messages": [user(f"m{i}") for i in range(MAX_BATCH + 1)]}
    error = assert_error(
        await client.post(f"/tasks/{uuid}/messages", json=too_many), 413, "batch_too_large"
    )
    assert error["details"]["limit"] == MAX_BATCH
    assert_unchanged(before, await state(client, context_dir, uuid))
    at_limit = {"messages": [user(f"m{i}") for i in range(MAX_BATCH)]}
    response = await client.post(f"/tasks/{uuid}/messages", json=at_limit)
    assert response.status_code == 201, response.text
    assert len(response.json()["seqs"]) == MAX_BATCH


# -- create ----------------------------------------------------------------------------------------

BAD_CREATES: dict[str, tuple[dict[str, Any], str]] = {
    "request_defaults_model": ({"request_defaults": {"model": "gpt-x"}}, "validation_error"),
    "request_defaults_messages": ({"request_defaults": {"messages": []}}, "validation_error"),
    "request_defaults_tools": ({"request_defaults": {"tools": []}}, "validation_error"),
    "request_defaults_stream": ({"request_defaults": {"stream": True}}, "validation_error"),
    "output_equals_window": (
        {"context_length": 2048, "max_output_tokens": 2048},
        "no_room_for_context",
    ),
    "output_over_window": (
        {"context_length": 2048, "max_output_tokens": 4096},
        "no_room_for_context",
    ),
    "output_fills_budget": (
        {"context_length": 10_000, "max_output_tokens": 9_000},
        "no_room_for_context",
    ),
    "unknown_field": ({"colour": "blue"}, "validation_error"),
    "window_too_small": ({"context_length": 100}, "validation_error"),
    "bad_uuid": ({"uuid": "../running/x"}, "validation_error"),
}


@pytest.mark.parametrize("case", BAD_CREATES)
async def test_bad_create(client: Client, context_dir: Path, case: str) -> None:
    """A refused create leaves no row, no directory in any location and no file."""
    overrides, code = BAD_CREATES[case]
    task_uuid = str(uuid_module.uuid4())
    body = task_body(**({"uuid": task_uuid} | overrides))
    before = await state(client, context_dir)
    assert_error(await client.post("/tasks", json=body), 422, code)
    assert_unchanged(before, await state(client, context_dir))
    assert not any((context_dir / loc / task_uuid).exists() for loc in LOCATIONS)
    assert_error(await client.get(f"/tasks/{task_uuid}"), 404, "task_not_found")


async def test_create_twice(client: Client, context_dir: Path) -> None:
    """Re-POST of a uuid: the same body is 200 (no change); a different body is 409 task_exists."""
    task_uuid = str(uuid_module.uuid4())
    body = task_body(uuid=task_uuid, system_prompt="Be brief.")
    first = await client.post("/tasks", json=body)
    assert first.status_code == 201, first.text
    before = await state(client, context_dir, task_uuid)

    again = await client.post("/tasks", json=body)
    assert again.status_code == 200, again.text
    assert again.json()["uuid"] == task_uuid
    assert again.json()["created_at"] == first.json()["created_at"]
    assert_unchanged(before, await state(client, context_dir, task_uuid))

    for different in (
        task_body(uuid=task_uuid, system_prompt="Be verbose."),
        task_body(uuid=task_uuid, system_prompt="Be brief.", model="gpt-4o-mini"),
        task_body(uuid=task_uuid),
    ):
        error = assert_error(await client.post("/tasks", json=different), 409, "task_exists")
        assert error["details"]["uuid"] == task_uuid
        assert_unchanged(before, await state(client, context_dir, task_uuid))


# -- lifecycle -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "action"),
    [
        ([], "resume"),
        (["complete"], "complete"),
        (["complete"], "resume"),
        (["complete"], "stop"),
        (["complete"], "fail"),
        (["fail"], "complete"),
        (["stop"], "stop"),
    ],
    ids=[
        "resume_running",
        "complete_completed",
        "resume_completed",
        "stop_completed",
        "fail_completed",
        "complete_failed",
        "stop_paused",
    ],
)
async def test_invalid_transition(
    client: Client, context_dir: Path, task: dict[str, Any], setup: list[str], action: str
) -> None:
    """A transition the lifecycle does not allow is 409 invalid_transition; nothing moves."""
    uuid = task["uuid"]
    for step in setup:
        body = {"error_message": "boom"} if step == "fail" else None
        response = await client.post(f"/tasks/{uuid}/{step}", json=body)
        assert response.status_code == 200, response.text
    before = await state(client, context_dir, uuid)
    body = {"error_message": "again"} if action == "fail" else None
    error = assert_error(
        await client.post(f"/tasks/{uuid}/{action}", json=body), 409, "invalid_transition"
    )
    assert error["details"]["status"] == before["task"]["status"]
    assert_unchanged(before, await state(client, context_dir, uuid))


@pytest.mark.parametrize(
    "body",
    [None, {}, {"error_message": ""}, {"error": "boom"}],
    ids=["none", "empty", "blank", "wrong_key"],
)
async def test_fail_without_error_message(
    client: Client, context_dir: Path, task: dict[str, Any], body: Any
) -> None:
    """POST /fail needs a non-empty error_message; without one the task stays running."""
    uuid = task["uuid"]
    before = await state(client, context_dir, uuid)
    assert_error(await client.post(f"/tasks/{uuid}/fail", json=body), 422, "validation_error")
    after = await state(client, context_dir, uuid)
    assert after["task"]["status"] == "running"
    assert_unchanged(before, after)


# -- idempotency -----------------------------------------------------------------------------------


async def test_idempotency_key_reused_with_another_body(
    client: Client, context_dir: Path, task: dict[str, Any]
) -> None:
    """A key already used for one body is refused for a different one, and appends nothing."""
    uuid = task["uuid"]
    headers = {"Idempotency-Key": "key-1"}
    first = await client.post(f"/tasks/{uuid}/messages", json=user("one"), headers=headers)
    assert first.status_code == 201, first.text
    before = await state(client, context_dir, uuid)
    for other in (
        user("two"),
        {"messages": [user("one"), user("two")]},
        {**user("one"), "name": "alice"},
    ):
        response = await client.post(f"/tasks/{uuid}/messages", json=other, headers=headers)
        error = assert_error(response, 422, "idempotency_key_reused")
        assert error["details"]["key"] == "key-1"
        assert_unchanged(before, await state(client, context_dir, uuid))
    # Control: the key is registered, so the original body is a replay (and appends nothing).
    replay = await client.post(f"/tasks/{uuid}/messages", json=user("one"), headers=headers)
    assert replay.status_code == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json()
    assert_unchanged(before, await state(client, context_dir, uuid))


# -- payload over budget ---------------------------------------------------------------------------


async def test_request_over_budget_is_an_error_not_a_truncated_payload(
    client: Client, context_dir: Path
) -> None:
    """A context that compaction cannot bring under its budget (here tool definitions larger
    than the budget: they go with every payload) makes GET /request 413 context_over_budget,
    every time, and changes nothing."""
    tool = {"type": "function", "function": {"name": "big", "description": "word " * 4000}}
    created = await create(client, context_length=2048, max_output_tokens=512, tools=[tool])
    uuid = created["uuid"]
    budget = int(2048 * 0.9) - 512
    response = await client.post(f"/tasks/{uuid}/messages", json=user("go on"))
    assert response.status_code == 201, response.text
    before = await state(client, context_dir, uuid)
    assert before["task"]["context"]["budget"] == budget
    assert before["task"]["context"]["tokens"] > budget

    for _ in range(2):
        response = await client.get(f"/tasks/{uuid}/request")
        error = assert_error(response, 413, "context_over_budget")
        assert error["details"]["budget"] == budget
        assert error["details"]["tokens"] > budget
        assert "X-Context-Tokens" not in response.headers
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_request_of_empty_context(client: Client, context_dir: Path) -> None:
    """A task without messages has no payload to serve: 409 context_empty."""
    uuid = (await create(client))["uuid"]
    before = await state(client, context_dir, uuid)
    assert_error(await client.get(f"/tasks/{uuid}/request"), 409, "context_empty")
    assert_unchanged(before, await state(client, context_dir, uuid))
