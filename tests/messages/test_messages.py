"""Appending messages and reading a task's history: token accounting, paging, records,
idempotency, statistics. (GET /context and GET /request: tests/payloads.)"""

from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from tests.support.conversations import READ_FILE_TOOL, function_call
from tests.support.errors import assert_error
from tests.support.files import read_jsonl, snapshot_dir, task_dir
from tests.support.payloads import PAYLOAD_OVERHEAD, context_view
from tests.support.tasks import create_task, post_messages, task_context


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """The seed 000 heuristic (characters / 4): these tests work out token counts by hand.
    Exact counting has its own tests (tests/tokens, tests/payloads)."""
    return Settings(context_dir=context_dir, token_counter="heuristic")


async def history(client: httpx.AsyncClient, task_uuid: str, **params: Any) -> dict[str, Any]:
    """GET /messages with query parameters; asserts 200."""
    response = await client.get(f"/tasks/{task_uuid}/messages", params=params)
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


# -- appends and token accounting --------------------------------------------------------


async def test_single_append_agrees_with_task_context(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    """One message: next seq, positive tokens; context_tokens grows by exactly those tokens and
    GET /tasks/{uuid} reports context_tokens + tools tokens + payload overhead."""
    task_uuid = task["uuid"]
    before = await task_context(client, task_uuid)
    result = await post_messages(
        client, task_uuid, {"role": "user", "content": "Fix the bug in a.py"}
    )
    assert result["seqs"] == [2]
    assert len(result["tokens"]) == 1
    assert result["tokens"][0] > 0
    assert result["compaction_scheduled"] is False
    assert result["context_tokens"] == before["tokens"] - PAYLOAD_OVERHEAD + result["tokens"][0]
    after = await task_context(client, task_uuid)
    assert after["tokens"] == result["context_tokens"] + PAYLOAD_OVERHEAD
    assert after["last_seq"] == 2
    assert after["messages"] == 2


async def test_batch_append_agrees_with_task_context_with_tools(
    client: httpx.AsyncClient,
) -> None:
    """A batch: consecutive seqs, a positive count per message, totals that add up, tools
    tokens included in the task's context tokens."""
    task = await create_task(
        client, system_prompt="You are a coding agent.", tools=[READ_FILE_TOOL]
    )
    task_uuid = task["uuid"]
    tools_tokens = (await context_view(client, task_uuid, fmt=None))["tools_tokens"]
    assert tools_tokens > 0
    assert task["context"]["tokens"] > tools_tokens + PAYLOAD_OVERHEAD

    previous = task["context"]["tokens"] - tools_tokens - PAYLOAD_OVERHEAD
    seq = 1
    for size in (1, 3, 2):
        messages = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {seq + i} " * 5}
            for i in range(size)
        ]
        result = await post_messages(client, task_uuid, {"messages": messages})
        assert result["seqs"] == list(range(seq + 1, seq + 1 + size))
        assert len(result["tokens"]) == size
        assert all(t > 0 for t in result["tokens"])
        assert result["context_tokens"] == previous + sum(result["tokens"])
        assert result["context_tokens"] > previous
        context = await task_context(client, task_uuid)
        assert context["tokens"] == result["context_tokens"] + tools_tokens + PAYLOAD_OVERHEAD
        assert context["last_seq"] == seq + size
        previous = result["context_tokens"]
        seq += size


async def test_batch_is_all_or_nothing(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path
) -> None:
    """A batch with one invalid message appends nothing at all."""
    task_uuid = task["uuid"]
    before = snapshot_dir(context_dir)
    response = await client.post(
        f"/tasks/{task_uuid}/messages",
        json={
            "messages": [
                {"role": "user", "content": "fine"},
                {"role": "tool", "tool_call_id": "call_404", "content": "orphan"},
            ]
        },
    )
    assert_error(response, 422, "unknown_tool_call")
    assert snapshot_dir(context_dir) == before
    assert (await history(client, task_uuid))["last_seq"] == 1


async def test_two_calls_with_one_id_are_refused(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path
) -> None:
    """A result could not say which of two calls with one id it answers: 422, nothing written,
    and the task goes on taking messages."""
    task_uuid = task["uuid"]
    call = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    before = snapshot_dir(context_dir)
    response = await client.post(
        f"/tasks/{task_uuid}/messages",
        json={"role": "assistant", "content": None, "tool_calls": [call, call]},
    )
    details = assert_error(response, 422, "duplicate_tool_call_id")
    assert details == {"index": 0, "tool_call_ids": ["call_1"]}
    assert snapshot_dir(context_dir) == before
    response = await client.post(
        f"/tasks/{task_uuid}/messages", json={"role": "user", "content": "hi"}
    )
    assert response.status_code == 201, response.text


# -- history ------------------------------------------------------------------------------


async def test_history_pages_chain_by_next_after_seq(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    """after_seq/limit pages: chaining next_after_seq visits seqs 1..26 exactly once."""
    task_uuid = task["uuid"]
    messages = [{"role": "user", "content": f"note {i}"} for i in range(25)]
    await post_messages(client, task_uuid, {"messages": messages})
    seqs: list[int] = []
    after = 0
    for _ in range(10):  # bounded: 3 pages are expected
        page = await history(client, task_uuid, after_seq=after, limit=10)
        assert page["last_seq"] == 26
        seqs += [m["seq"] for m in page["messages"]]
        if page["next_after_seq"] is None:
            break
        assert page["next_after_seq"] == page["messages"][-1]["seq"]
        after = page["next_after_seq"]
    assert seqs == list(range(1, 27))
    middle = await history(client, task_uuid, after_seq=5, limit=3)
    assert [m["seq"] for m in middle["messages"]] == [6, 7, 8]
    assert middle["next_after_seq"] == 8
    last = await history(client, task_uuid, after_seq=24, limit=10)
    assert [m["seq"] for m in last["messages"]] == [25, 26]
    assert last["next_after_seq"] is None
    beyond = await history(client, task_uuid, after_seq=26)
    assert beyond == {"messages": [], "last_seq": 26, "next_after_seq": None}
    exact = await history(client, task_uuid, after_seq=16, limit=10)
    assert [m["seq"] for m in exact["messages"]] == list(range(17, 27))
    assert exact["next_after_seq"] is None
    assert len((await history(client, task_uuid, limit=1000))["messages"]) == 26
    assert len((await history(client, task_uuid, limit=1))["messages"]) == 1


@pytest.mark.parametrize(
    "params", [{"limit": 0}, {"limit": 1001}, {"limit": -5}, {"after_seq": -1}]
)
async def test_history_paging_bounds(
    client: httpx.AsyncClient, task: dict[str, Any], params: dict[str, int]
) -> None:
    """limit outside 1..1000 and a negative after_seq are 422."""
    response = await client.get(f"/tasks/{task['uuid']}/messages", params=params)
    assert_error(response, 422, "validation_error")


async def test_records_carry_envelope_and_tool_fields(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path
) -> None:
    """Records: seq, role, content, UTC timestamp, tokens, tool_calls, tool_call_id, tool_name
    from the matching call, usage; unknown extras stay in messages.jsonl but not in /request."""
    task_uuid = task["uuid"]
    usage = {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}
    calls = [function_call("call_a", "read_file"), function_call("call_b", "list_dir", "src")]
    await post_messages(
        client,
        task_uuid,
        {
            "messages": [
                {"role": "user", "content": "Fix it", "x_trace": {"span": "abc"}},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": calls,
                    "usage": usage,
                    "reasoning": "look first",
                },
                {"role": "tool", "tool_call_id": "call_b", "content": "a.py b.py"},
                {"role": "tool", "tool_call_id": "call_a", "content": "def main(): ..."},
            ]
        },
    )
    records = (await history(client, task_uuid))["messages"]
    assert [(r["seq"], r["role"]) for r in records] == [
        (1, "system"),
        (2, "user"),
        (3, "assistant"),
        (4, "tool"),
        (5, "tool"),
    ]
    stamps = []
    for record in records:
        stamp = datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
        offset = stamp.utcoffset()
        assert offset is not None
        assert offset.total_seconds() == 0
        stamps.append(stamp)
        assert isinstance(record["tokens"], int)
        assert record["tokens"] > 0
    assert stamps == sorted(stamps)
    user, assistant, result_b, result_a = records[1:]
    assert user["content"] == "Fix it"
    assert user["x_trace"] == {"span": "abc"}
    assert assistant["content"] is None
    assert assistant["tool_calls"] == calls
    assert assistant["usage"] == usage
    assert assistant["reasoning"] == "look first"
    assert result_b["tool_call_id"] == "call_b"
    assert result_b["tool_name"] == "list_dir"
    assert result_a["tool_call_id"] == "call_a"
    assert result_a["tool_name"] == "read_file"

    on_disk = read_jsonl(task_dir(context_dir, task_uuid) / "messages.jsonl")
    assert on_disk[1]["x_trace"] == {"span": "abc"}
    assert on_disk[2]["reasoning"] == "look first"
    assert on_disk[2]["usage"] == usage
    assert on_disk[4]["tool_name"] == "read_file"

    payload = (await client.get(f"/tasks/{task_uuid}/request")).json()
    assert payload["messages"][1:] == [
        {"role": "user", "content": "Fix it"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "content": "a.py b.py", "tool_call_id": "call_b"},
        {"role": "tool", "content": "def main(): ...", "tool_call_id": "call_a"},
    ]


async def test_content_parts_and_names_pass_through(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    """User content parts (text + image_url) and a user's name reach /request as posted; a tool
    message's name does not (OpenAI's tool messages have no name)."""
    task_uuid = task["uuid"]
    parts = [
        {"type": "text", "text": "What is in this screenshot?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/s.png", "detail": "low"}},
    ]
    await post_messages(client, task_uuid, {"role": "user", "content": parts, "name": "alice"})
    await post_messages(
        client,
        task_uuid,
        {"role": "assistant", "content": None, "tool_calls": [function_call("c1")]},
    )
    await post_messages(
        client,
        task_uuid,
        {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": "read_file"},
    )
    payload = (await client.get(f"/tasks/{task_uuid}/request")).json()
    user, _, tool = payload["messages"][1:]
    assert user == {"role": "user", "content": parts, "name": "alice"}
    assert tool == {"role": "tool", "content": "ok", "tool_call_id": "c1"}
    records = (await history(client, task_uuid))["messages"]
    assert records[1]["content"] == parts
    assert records[1]["name"] == "alice"
    assert records[3]["name"] == "read_file"


# -- idempotency --------------------------------------------------------------------------


async def test_idempotency_key_replays_without_appending(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path
) -> None:
    """A retry with the same Idempotency-Key gets the same body, Idempotent-Replayed: true,
    and appends nothing; reusing the key for another body is 422."""
    task_uuid = task["uuid"]
    body = {"messages": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]}
    headers = {"Idempotency-Key": "req-42"}
    first = await client.post(f"/tasks/{task_uuid}/messages", json=body, headers=headers)
    assert first.status_code == 201, first.text
    assert "Idempotent-Replayed" not in first.headers
    assert first.json()["seqs"] == [2, 3]
    files = snapshot_dir(context_dir)
    stats = (await client.get(f"/tasks/{task_uuid}")).json()["statistics"]

    for _ in range(2):
        retry = await client.post(f"/tasks/{task_uuid}/messages", json=body, headers=headers)
        assert retry.status_code == 201, retry.text
        assert retry.json() == first.json()
        assert retry.headers["Idempotent-Replayed"] == "true"
    assert snapshot_dir(context_dir) == files
    assert (await history(client, task_uuid))["last_seq"] == 3
    assert (await client.get(f"/tasks/{task_uuid}")).json()["statistics"] == stats

    reused = await client.post(
        f"/tasks/{task_uuid}/messages", json={"role": "user", "content": "other"}, headers=headers
    )
    assert_error(reused, 422, "idempotency_key_reused")
    assert snapshot_dir(context_dir) == files

    other_key = await client.post(
        f"/tasks/{task_uuid}/messages", json=body, headers={"Idempotency-Key": "req-43"}
    )
    assert other_key.status_code == 201
    assert other_key.json()["seqs"] == [4, 5]


# -- statistics ---------------------------------------------------------------------------


async def test_statistics_count_llm_calls_tokens_and_tool_calls(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    """llm_call_count counts assistant messages with usage; total_tokens sums prompt +
    completion; tool_call_count counts every tool call."""
    task_uuid = task["uuid"]
    await post_messages(client, task_uuid, {"role": "user", "content": "Fix the bug"})
    await post_messages(
        client,
        task_uuid,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [function_call("c1"), function_call("c2", path="b.py")],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50},
        },
    )
    await post_messages(
        client,
        task_uuid,
        {
            "messages": [
                {"role": "tool", "tool_call_id": "c1", "content": "a"},
                {"role": "tool", "tool_call_id": "c2", "content": "b"},
            ]
        },
    )
    await post_messages(
        client,
        task_uuid,
        {
            "role": "assistant",
            "content": "Reading one more.",
            "tool_calls": [function_call("c3", "grep")],
            "usage": {"prompt_tokens": 1200},
        },
    )
    await post_messages(
        client, task_uuid, {"role": "tool", "tool_call_id": "c3", "content": "none"}
    )
    await post_messages(
        client, task_uuid, {"role": "assistant", "content": "No usage reported here."}
    )
    stats = (await client.get(f"/tasks/{task_uuid}")).json()["statistics"]
    assert stats["total_messages"] == 8
    assert stats["llm_call_count"] == 2
    assert stats["total_tokens"] == 1000 + 50 + 1200
    assert stats["tool_call_count"] == 3


# -- tokens -------------------------------------------------------------------------------


async def test_japanese_text_counts_about_twice_as_many_tokens(
    client: httpx.AsyncClient,
) -> None:
    """The heuristic counts chars/2 for Japanese and chars/4 otherwise: a 100-char Japanese
    message costs about twice a 100-char English one."""
    task = await create_task(client)
    japanese = ("日本語のテキストを書きます" * 10)[:100]
    english = ("plain english text " * 10)[:100]
    assert len(japanese) == len(english) == 100
    ja_tokens = (await post_messages(client, task["uuid"], {"role": "user", "content": japanese}))[
        "tokens"
    ][0]
    en_tokens = (await post_messages(client, task["uuid"], {"role": "user", "content": english}))[
        "tokens"
    ][0]
    assert ja_tokens > en_tokens
    assert 1.5 * en_tokens <= ja_tokens <= 2.5 * en_tokens
    context = await context_view(client, task["uuid"], fmt=None)
    assert context["token_counter"] == "heuristic"
    assert [m["tokens"] for m in context["messages"]] == [ja_tokens, en_tokens]


async def test_longer_content_costs_more_tokens(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    """Token counts grow with the content."""
    short = await post_messages(client, task["uuid"], {"role": "user", "content": "word " * 10})
    long = await post_messages(client, task["uuid"], {"role": "user", "content": "word " * 100})
    assert long["tokens"][0] > short["tokens"][0] > 0
