"""What a client that gets the request wrong is told: a body not declared as JSON, one that is
not an object, broken JSON, another provider's message posted as OpenAI's. Each answer says
what was expected, and nothing is written."""

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.conversations import user
from tests.support.errors import assert_error
from tests.support.tasks import task_body
from tests.support.unchanged import assert_unchanged, state

Client = httpx.AsyncClient
BODY = b'{"role": "user", "content": "Fix the bug in a.py"}'


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ({}, "no Content-Type was sent"),
        ({"content-type": "text/plain"}, "not text/plain"),
        ({"content-type": "application/x-www-form-urlencoded"}, "not application/x-www-form"),
        ({"content-type": "application/a/b+json"}, "not application/a/b+json"),
        ({"content-type": "application/json, application/x+json"}, "not application/json, "),
    ],
    ids=["missing", "text", "form", "two_slashes", "two_types"],
)
async def test_a_body_not_declared_as_json_is_415(
    client: Client, context_dir: Path, task: dict[str, Any], headers: dict[str, str], named: str
) -> None:
    uuid = task["uuid"]
    before = await state(client, context_dir, uuid)
    response = await client.post(f"/tasks/{uuid}/messages", content=BODY, headers=headers)
    details = assert_error(response, 415, "unsupported_media_type")
    message = response.json()["error"]["message"]
    assert "Content-Type: application/json" in message
    assert named in message
    assert details["expected"] == "application/json"
    assert_unchanged(before, await state(client, context_dir, uuid))


@pytest.mark.parametrize(
    "content_type",
    ["application/json; charset=utf-8", "application/vnd.api+json", "APPLICATION/JSON"],
)
async def test_json_types_with_parameters_or_suffixes_are_json(
    client: Client, task: dict[str, Any], content_type: str
) -> None:
    response = await client.post(
        f"/tasks/{task['uuid']}/messages", content=BODY, headers={"content-type": content_type}
    )
    assert response.status_code == 201, response.text


async def test_a_bare_array_is_told_what_the_body_must_be(
    client: Client, context_dir: Path, task: dict[str, Any]
) -> None:
    uuid = task["uuid"]
    before = await state(client, context_dir, uuid)
    response = await client.post(f"/tasks/{uuid}/messages", json=[user("one"), user("two")])
    details = assert_error(response, 422, "validation_error")
    message = response.json()["error"]["message"]
    assert message == (
        'the body must be a JSON object: one message ({"role": ..., "content": ...}) or a '
        'batch ({"messages": [...]}); got an array'
    )
    assert details == {"expected": "object", "got": "an array"}
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_an_array_for_a_task_says_the_body_must_be_an_object(
    client: Client, context_dir: Path
) -> None:
    before = await state(client, context_dir)
    response = await client.post("/tasks", json=[task_body()])
    assert_error(response, 422, "validation_error")
    assert response.json()["error"]["message"] == "body: the body must be a JSON object"
    assert_unchanged(before, await state(client, context_dir))


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (
            b'{"role": "user",\n "content": "x",}',
            "line 2, column 16: trailing comma is not allowed",
        ),
        (b'{"role": "user", "content": "unterminated', "line 1, column 42: unexpected end of data"),
        (b'{\n  "role": user\n}', "line 2, column 11: unexpected character, expected a JSON value"),
    ],
    ids=["trailing_comma", "unterminated", "bare_word"],
)
async def test_broken_json_says_where_and_why(
    client: Client, context_dir: Path, task: dict[str, Any], raw: bytes, where: str
) -> None:
    uuid = task["uuid"]
    before = await state(client, context_dir, uuid)
    response = await client.post(
        f"/tasks/{uuid}/messages", content=raw, headers={"content-type": "application/json"}
    )
    details = assert_error(response, 422, "invalid_json")
    assert response.json()["error"]["message"] == f"invalid JSON at {where}"
    assert set(details) == {"line", "column", "reason"}
    assert_unchanged(before, await state(client, context_dir, uuid))


ANTHROPIC_CALL = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}],
}


async def test_another_providers_message_posted_as_openai_names_its_input(
    client: Client, context_dir: Path, task: dict[str, Any]
) -> None:
    uuid = task["uuid"]
    before = await state(client, context_dir, uuid)
    response = await client.post(
        f"/tasks/{uuid}/messages", params={"input": "openai"}, json=ANTHROPIC_CALL
    )
    details = assert_error(response, 422, "validation_error")
    assert response.json()["error"]["message"] == (
        "message 0 has a tool_use block, which OpenAI's shape does not have: this looks like "
        "an Anthropic message; post it with ?input=anthropic"
    )
    assert details["looks_like"] == "anthropic"
    ollama = {"role": "user", "content": "x", "images": ["iVBORw0KGgo="]}
    response = await client.post(
        f"/tasks/{uuid}/messages", params={"input": "anthropic"}, json=ollama
    )
    assert_error(response, 422, "validation_error")
    assert response.json()["error"]["message"].endswith("post it with ?input=ollama")
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_without_input_an_anthropic_message_is_detected(
    client: Client, task: dict[str, Any]
) -> None:
    response = await client.post(f"/tasks/{task['uuid']}/messages", json=ANTHROPIC_CALL)
    assert response.status_code == 201, response.text


async def test_a_body_mixing_providers_is_ambiguous(
    client: Client, context_dir: Path, task: dict[str, Any]
) -> None:
    uuid = task["uuid"]
    before = await state(client, context_dir, uuid)
    openai_call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        ],
    }
    body = {"messages": [openai_call, {"role": "user", "images": ["iVBORw0KGgo="]}]}
    response = await client.post(f"/tasks/{uuid}/messages", json=body)
    details = assert_error(response, 422, "ambiguous_input_format")
    assert details["evidence"] == {
        "ollama": "message 1 has images",
        "openai": "message 0 has tool call arguments as JSON text",
    }
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_an_unknown_input_format_is_422(client: Client, task: dict[str, Any]) -> None:
    response = await client.post(
        f"/tasks/{task['uuid']}/messages", params={"input": "gemini"}, json=user()
    )
    assert_error(response, 422, "validation_error")
