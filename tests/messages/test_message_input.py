"""Bad message bodies get the right 4xx in the one error shape, and change nothing (SPEC
§3.8): bad roles and pairing, malformed JSON, reused idempotency keys, messages and batches over
their limits.

"Changes nothing" is checked three ways for every case (tests/support/unchanged.py): the bytes of
every file under CONTEXT_DIR, every directory under it, and the task as the API reports it.

The module runs with small size limits so the 413 cases stay cheap: MAX_MESSAGE_BYTES 16 KiB,
MAX_BATCH_MESSAGES 10.
"""

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from tests.support.conversations import tool_call, tool_result, user
from tests.support.errors import assert_error
from tests.support.unchanged import (
    MAX_BATCH,
    MAX_BODY,
    MAX_MESSAGE,
    assert_unchanged,
    small_limits,
    state,
)

pytestmark = pytest.mark.database_agnostic

Client = httpx.AsyncClient


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """Shadows conftest's settings: the default ones with small size limits."""
    return small_limits(context_dir)


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
    # An empty body is a missing body, not broken JSON; every other case is broken JSON.
    assert_error(response, 422, "validation_error" if raw == b"" else "invalid_json")
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_refused_append_keeps_updated_at(client: Client, task: dict[str, Any]) -> None:
    """A refused append leaves the task row entirely alone, updated_at included (SPEC §3.8)."""
    uuid = task["uuid"]
    before = (await client.get(f"/tasks/{uuid}")).json()
    response = await client.post(f"/tasks/{uuid}/messages", json=tool_result("call_nope"))
    assert_error(response, 422, "unknown_tool_call")
    after = (await client.get(f"/tasks/{uuid}")).json()
    assert after["updated_at"] == before["updated_at"]


async def test_message_too_large(client: Client, context_dir: Path, task: dict[str, Any]) -> None:
    """One message over MAX_MESSAGE_BYTES (in a body under MAX_BODY_BYTES) is 413."""
    uuid = task["uuid"]
    body = user("x" * (2 * MAX_MESSAGE))
    assert len(orjson.dumps(body)) < MAX_BODY
    before = await state(client, context_dir, uuid)
    details = assert_error(
        await client.post(f"/tasks/{uuid}/messages", json=body), 413, "message_too_large"
    )
    assert details["limit"] == MAX_MESSAGE
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_batch_too_large(client: Client, context_dir: Path, task: dict[str, Any]) -> None:
    """A batch of MAX_BATCH_MESSAGES + 1 is 413; a batch of exactly the limit is accepted."""
    uuid = task["uuid"]
    before = await state(client, context_dir, uuid)
    too_many = {"messages": [user(f"m{i}") for i in range(MAX_BATCH + 1)]}
    details = assert_error(
        await client.post(f"/tasks/{uuid}/messages", json=too_many), 413, "batch_too_large"
    )
    assert details["limit"] == MAX_BATCH
    assert_unchanged(before, await state(client, context_dir, uuid))
    at_limit = {"messages": [user(f"m{i}") for i in range(MAX_BATCH)]}
    response = await client.post(f"/tasks/{uuid}/messages", json=at_limit)
    assert response.status_code == 201, response.text
    assert len(response.json()["seqs"]) == MAX_BATCH


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
        details = assert_error(response, 422, "idempotency_key_reused")
        assert details["key"] == "key-1"
        assert_unchanged(before, await state(client, context_dir, uuid))
    # Control: the key is registered, so the original body is a replay (and appends nothing).
    replay = await client.post(f"/tasks/{uuid}/messages", json=user("one"), headers=headers)
    assert replay.status_code == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json()
    assert_unchanged(before, await state(client, context_dir, uuid))
