"""Bad task requests get the right 4xx in the one error shape, and change nothing (SPEC §3.8):
refused creates, a uuid posted again, transitions the lifecycle does not allow, a failure
without its message, writes to a task that is not running.

"Changes nothing" is checked three ways for every case (tests/support/unchanged.py): the bytes of
every file under CONTEXT_DIR, every directory under it, and the task as the API reports it. A
refused create also leaves no task in GET /tasks and no directory for the uuid in any location.
"""

import uuid as uuid_module
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.conversations import user
from tests.support.errors import assert_error
from tests.support.tasks import task_body
from tests.support.unchanged import LOCATIONS, assert_unchanged, state

Client = httpx.AsyncClient


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
    details = assert_error(
        await client.post(f"/tasks/{uuid}{suffix}", json=payload), 409, "task_not_writable"
    )
    assert details["status"] == before["task"]["status"]
    assert_unchanged(before, await state(client, context_dir, uuid))


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
        details = assert_error(await client.post("/tasks", json=different), 409, "task_exists")
        assert details["uuid"] == task_uuid
        assert_unchanged(before, await state(client, context_dir, task_uuid))


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
    details = assert_error(
        await client.post(f"/tasks/{uuid}/{action}", json=body), 409, "invalid_transition"
    )
    assert details["status"] == before["task"]["status"]
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
