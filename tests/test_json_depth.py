"""JSON bodies nesting deeper than MAX_JSON_DEPTH (64) are a 422 `json_too_deep` before any
work: nothing is written, on an append as on a create. Up to the limit they are taken.

Past about 255 levels the serializers that store a message refused it after it was accepted
(a 500); past orjson's 1024 the parser's own refusal was a generic `invalid_json`.
"""

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.json_depth import nests_deeper
from tests.support.errors import assert_error
from tests.support.files import snapshot_dir
from tests.support.tasks import task_body

LIMIT = 64  # the default of MAX_JSON_DEPTH


def nested(levels: int) -> Any:
    """``levels`` objects inside each other around 1 (0 levels: the scalar)."""
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def message_body(depth: int) -> bytes:
    """An append whose whole body nests ``depth`` levels: {messages: [{extra: ...}]} is 3."""
    message = {"role": "user", "content": "hi", "extra": nested(depth - 3)}
    return orjson.dumps({"messages": [message]})


def deep_text(depth: int) -> bytes:
    """An append nesting ``depth`` levels, built as text (orjson cannot write past 254)."""
    inner = b'{"a":' * (depth - 3) + b"1" + b"}" * (depth - 3)
    return b'{"messages":[{"role":"user","content":"hi","extra":' + inner + b"}]}"


def test_depth_is_counted_in_containers() -> None:
    assert not nests_deeper(1, 0)
    assert not nests_deeper([], 1)
    assert nests_deeper([[]], 1)
    assert not nests_deeper(orjson.loads(message_body(LIMIT)), LIMIT)
    assert nests_deeper(orjson.loads(message_body(LIMIT + 1)), LIMIT)


async def test_an_append_at_the_limit_is_taken(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    response = await client.post(
        f"/tasks/{task['uuid']}/messages",
        content=message_body(LIMIT),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 201, response.text
    history = await client.get(f"/tasks/{task['uuid']}/messages")
    assert history.status_code == 200, history.text


@pytest.mark.parametrize("depth", [LIMIT + 1, 300, 10_000])
async def test_a_deeper_append_is_refused_and_nothing_written(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path, depth: int
) -> None:
    uuid = task["uuid"]
    files_before = snapshot_dir(context_dir)
    task_before = (await client.get(f"/tasks/{uuid}")).json()
    response = await client.post(
        f"/tasks/{uuid}/messages",
        content=deep_text(depth),
        headers={"content-type": "application/json"},
    )
    details = assert_error(response, 422, "json_too_deep")
    assert details == {"where": "the request body", "max_depth": LIMIT}
    assert snapshot_dir(context_dir) == files_before
    assert (await client.get(f"/tasks/{uuid}")).json() == task_before
    served = await client.get(f"/tasks/{uuid}/request")
    assert served.status_code == 200, served.text


@pytest.mark.parametrize("depth", [LIMIT + 1, 10_000])
async def test_a_deeper_create_is_refused_and_no_task_appears(
    client: httpx.AsyncClient, context_dir: Path, depth: int
) -> None:
    files_before = snapshot_dir(context_dir)
    metadata = b'{"a":' * (depth - 1) + b"1" + b"}" * (depth - 1)
    body = orjson.dumps(task_body(metadata={})).replace(b'"metadata":{}', b'"metadata":' + metadata)
    response = await client.post(
        "/tasks", content=body, headers={"content-type": "application/json"}
    )
    assert_error(response, 422, "json_too_deep")
    assert (await client.get("/tasks")).json()["tasks"] == []
    assert snapshot_dir(context_dir) == files_before


async def test_a_create_at_the_limit_is_taken(client: httpx.AsyncClient) -> None:
    response = await client.post("/tasks", json=task_body(metadata=nested(LIMIT - 1)))
    assert response.status_code == 201, response.text


async def test_tool_arguments_nested_past_any_encoder_are_served_as_text(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    """Arguments are a string to the API: 300 levels inside it are taken, and the formats that
    send arguments as an object send these as text rather than failing on them."""
    arguments = '{"a": ' * 300 + "1" + "}" * 300
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    response = await client.post(f"/tasks/{task['uuid']}/messages", json={"messages": messages})
    assert response.status_code == 201, response.text
    for fmt in ("openai", "anthropic", "ollama"):
        response = await client.get(f"/tasks/{task['uuid']}/request", params={"format": fmt})
        assert response.status_code == 200, (fmt, response.text)
        assert arguments in response.text.replace('\\"', '"'), fmt
