"""Bad requests to any route get the right 4xx in the one error shape, and change nothing
(SPEC §3.8): task paths that are not a uuid (sent through httpx, and raw with ``..``), unknown
tasks on every route, bodies over MAX_BODY_BYTES.

"Changes nothing" is checked three ways for every case (tests/support/unchanged.py): the bytes of
every file under CONTEXT_DIR, every directory under it, and the task as the API reports it. An
oversized create also leaves no task in GET /tasks.

The module runs with small size limits so the 413 cases stay cheap: MAX_BODY_BYTES 64 KiB.
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
from tests.support.asgi_raw import raw
from tests.support.conversations import user
from tests.support.errors import assert_error
from tests.support.tasks import task_body
from tests.support.unchanged import LOCATIONS, MAX_BODY, KiB, assert_unchanged, small_limits, state

pytestmark = pytest.mark.database_agnostic

Client = httpx.AsyncClient


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """Shadows conftest's settings: the default ones with small size limits."""
    return small_limits(context_dir)


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
    details = assert_error(response, 404, "task_not_found")
    assert details["uuid"] == unknown
    assert_unchanged(before, await state(client, context_dir, task["uuid"]))
    assert not any((context_dir / loc / unknown).exists() for loc in LOCATIONS)


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
    details = assert_error(response, 413, "body_too_large")
    assert details["limit"] == MAX_BODY
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_body_too_large_on_create(client: Client, context_dir: Path) -> None:
    """The body limit holds for every endpoint: an oversized create makes no task."""
    before = await state(client, context_dir)
    body = task_body(uuid=str(uuid_module.uuid4()), system_prompt="x" * (100 * KiB))
    assert_error(await client.post("/tasks", json=body), 413, "body_too_large")
    assert_unchanged(before, await state(client, context_dir))
