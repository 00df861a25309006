"""The context overview (GET /context) and the assembled request (GET /request) of a task."""

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from tests.support.conversations import READ_FILE_TOOL, function_call
from tests.support.errors import assert_error
from tests.support.payloads import PAYLOAD_OVERHEAD, context_view
from tests.support.tasks import create_task, post_messages, task_context


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """The seed 000 heuristic (characters / 4): these tests work out token counts by hand.
    Exact counting has its own tests (tests/tokens, test_formats_corpus.py)."""
    return Settings(context_dir=context_dir, token_counter="heuristic")


# -- /context -----------------------------------------------------------------------------


async def test_context_overview_fields_and_sums(client: httpx.AsyncClient) -> None:
    """GET /context: all fields, per-message tokens as appended, and their sum equal to the
    context tokens minus tools tokens minus the payload overhead."""
    task = await create_task(
        client, system_prompt="You are a coding agent.", tools=[READ_FILE_TOOL]
    )
    task_uuid = task["uuid"]
    appended = await post_messages(
        client,
        task_uuid,
        {
            "messages": [
                {"role": "user", "content": "Fix the bug in a.py"},
                {"role": "assistant", "content": None, "tool_calls": [function_call("c1")]},
                {"role": "tool", "tool_call_id": "c1", "content": "def main(): pass"},
            ]
        },
    )
    view = await context_view(client, task_uuid, fmt=None)
    for field in (
        "tokens",
        "budget",
        "threshold",
        "window",
        "reserved_output",
        "tools_tokens",
        "token_counter",
        "next_action",
        "message_count",
        "last_seq",
        "messages",
    ):
        assert field in view, field
    assert view["token_counter"] == "heuristic"
    assert view["next_action"] == "none"
    assert view["window"] == 128000
    assert view["budget"] == 115200 - 4096
    assert view["threshold"] == 89600
    assert view["reserved_output"] == 4096
    assert view["message_count"] == 4
    assert view["last_seq"] == 4
    entries = view["messages"]
    assert [e["index"] for e in entries] == [0, 1, 2, 3]
    assert [e["message"]["role"] for e in entries] == ["system", "user", "assistant", "tool"]
    assert entries[2]["message"]["tool_calls"] == [function_call("c1")]
    assert all(e["tokens"] > 0 for e in entries)
    assert [e["tokens"] for e in entries[1:]] == appended["tokens"]
    per_message = sum(e["tokens"] for e in entries)
    assert per_message == view["tokens"] - view["tools_tokens"] - PAYLOAD_OVERHEAD
    assert per_message == appended["context_tokens"]
    assert view["tokens"] == (await task_context(client, task_uuid))["tokens"]


async def test_context_overview_of_an_empty_task(client: httpx.AsyncClient) -> None:
    """A task without messages has an empty overview: only the payload overhead."""
    task = await create_task(client)
    view = await context_view(client, task["uuid"], fmt=None)
    assert view["messages"] == []
    assert view["message_count"] == 0
    assert view["tokens"] == PAYLOAD_OVERHEAD
    assert view["next_action"] == "none"


async def test_next_action_follows_threshold_and_budget(client: httpx.AsyncClient) -> None:
    """next_action is "none" below the threshold, "condense" from it, "over_budget" beyond
    the budget; /request then compacts first and serves a payload within the budget. (The task
    has no tier that runs in the background, so the context climbs past its threshold.)"""
    task = await create_task(
        client,
        context_length=2048,
        max_output_tokens=100,
        compaction={"tiers": ["truncate", "elide"]},
    )
    task_uuid = task["uuid"]
    view = await context_view(client, task_uuid, fmt=None)
    assert view["threshold"] == 1433
    assert view["budget"] == 1843 - 100
    step = "x" * 400  # about 100 tokens: smaller than the 310-token condense band
    seen: list[str] = []
    for _ in range(40):  # bounded: about 18 steps are expected
        await post_messages(client, task_uuid, {"role": "user", "content": step})
        view = await context_view(client, task_uuid, fmt=None)
        tokens = view["tokens"]
        expected = (
            "over_budget"
            if tokens > view["budget"]
            else "condense"
            if tokens >= view["threshold"]
            else "none"
        )
        assert view["next_action"] == expected, tokens
        if not seen or seen[-1] != expected:
            seen.append(expected)
        if expected == "over_budget":
            response = await client.get(f"/tasks/{task_uuid}/request")
            assert response.status_code == 200, response.text
            assert int(response.headers["X-Context-Tokens"]) <= view["budget"]
            assert (await context_view(client, task_uuid, fmt=None))["tokens"] <= view["budget"]
            break
    assert seen == ["none", "condense", "over_budget"]


# -- /request -----------------------------------------------------------------------------


async def test_request_payload_has_tools_defaults_and_headers(client: httpx.AsyncClient) -> None:
    """/request: model, messages, tools, request_defaults, max_completion_tokens, and the
    X-Context-* / X-Token-Counter headers matching the context overview."""
    task = await create_task(
        client,
        system_prompt="You are a coding agent.",
        tools=[READ_FILE_TOOL],
        request_defaults={"temperature": 0.2, "top_p": 0.9},
        max_output_tokens=2048,
    )
    task_uuid = task["uuid"]
    await post_messages(client, task_uuid, {"role": "user", "content": "Fix the bug"})
    response = await client.get(f"/tasks/{task_uuid}/request", params={"format": "openai"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    payload = response.json()
    assert payload == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the bug"},
        ],
        "tools": [READ_FILE_TOOL],
        "temperature": 0.2,
        "top_p": 0.9,
        "max_completion_tokens": 2048,
    }
    view = await context_view(client, task_uuid, fmt=None)
    assert int(response.headers["X-Context-Tokens"]) == view["tokens"]
    assert int(response.headers["X-Context-Budget"]) == view["budget"]
    assert response.headers["X-Token-Counter"] == "heuristic"


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("messages", "whole"),
    [(2, True), (8, False), (40, False)],
    ids=["small-whole", "streamed-from-the-first-read", "streamed-past-the-first-read"],
)
async def test_a_small_payload_is_one_body_and_a_larger_one_streams(
    client: httpx.AsyncClient, fmt: str, messages: int, whole: bool
) -> None:
    """A small context (up to 64 KiB) is answered as one body with its length; a larger one
    streams, whether the first read (1 MiB) held it or not. All carry every message in order."""
    task = await create_task(client, context_length=10_000_000, max_output_tokens=1024)
    for i in range(messages):
        role = ("user", "assistant")[i % 2]
        content = f"{i} " + "x" * (30 * 1024)
        await post_messages(client, task["uuid"], {"role": role, "content": content})
    async with client.stream(
        "GET", f"/tasks/{task['uuid']}/request", params={"format": fmt}
    ) as response:
        assert response.status_code == 200
        body = await response.aread()
    if whole:
        assert int(response.headers["content-length"]) == len(body)
    else:
        assert "content-length" not in response.headers
    assert (len(body) > 1 << 20) == (messages == 40)
    payload = httpx.Response(200, content=body).json()
    contents = [m["content"] for m in payload["messages"]]
    texts = [c if isinstance(c, str) else c[0]["text"] for c in contents]
    assert [text.split(" ", 1)[0] for text in texts] == [str(i) for i in range(messages)]


async def test_request_without_tools_has_no_tools_key(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    """A task without tools sends no "tools" key; max_completion_tokens is the reserve."""
    payload = (await client.get(f"/tasks/{task['uuid']}/request")).json()
    assert "tools" not in payload
    assert payload["max_completion_tokens"] == 4096


async def test_request_on_empty_task_is_409(client: httpx.AsyncClient) -> None:
    """No message at all: 409 context_empty rather than a payload the LLM would reject."""
    task = await create_task(client)
    assert_error(await client.get(f"/tasks/{task['uuid']}/request"), 409, "context_empty")


async def test_request_rejects_unknown_format(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    """An unsupported format is a validation error."""
    response = await client.get(f"/tasks/{task['uuid']}/request", params={"format": "nope"})
    assert_error(response, 422, "validation_error")
