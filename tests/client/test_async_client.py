"""The async client against the real app (in-process, over httpx's ASGI transport): every call
of the API, the answers as the service gives them, and its errors as exceptions."""

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from context_client import (
    AsyncContextClient,
    AuthenticationError,
    ConflictError,
    ContextClient,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from context_client.types import ChatMessage, MessageRecord, ToolDefinition
from tests.support.client import task_key
from tests.support.lifespan import lifespan_of
from tests.support.settings import fast_settings
from tests.support.waits import WAIT_S

READ_FILE: ToolDefinition = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
CALL: ChatMessage = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    ],
    "usage": {"prompt_tokens": 120, "completion_tokens": 8},
}
RESULT: ChatMessage = {"role": "tool", "tool_call_id": "call_1", "content": "def main(): ..."}
UNKNOWN_UUID = "00000000-0000-4000-8000-000000000000"
AGENT_KEY = "agent-7Qm2vX9pL4sK8wR1"
ADMIN_KEY = "admin-3Nf6bT1yH8cJ5zD0"


async def _history(service: AsyncContextClient, uuid: str, limit: int) -> list[MessageRecord]:
    """Every record, page after page of ``limit``."""
    records: list[MessageRecord] = []
    after: int | None = 0
    while after is not None:
        page = await service.list_messages(uuid, after_seq=after, limit=limit)
        records += page["messages"]
        after = page["next_after_seq"]
    return records


async def test_a_task_lives_through_the_client(service: AsyncContextClient) -> None:
    """Create, append (single and batch), history in pages, payload, context, stop, resume,
    complete, final summary and its job, delete: each answer as the service shapes it."""
    created = await service.create_task(
        task_key(),
        "gpt-4o",
        user="alice",
        system_prompt="You are a coding agent.",
        tools=[READ_FILE],
        request_defaults={"temperature": 0.2},
    )
    uuid = created["uuid"]
    assert (created["status"], created["user"], created["statistics"]["total_messages"]) == (
        "running",
        "alice",
        1,
    )
    first = await service.append(uuid, {"role": "user", "content": "Fix a.py"})
    batch = await service.append_batch(uuid, [CALL, RESULT])
    assert (first["seqs"], batch["seqs"]) == ([2], [3, 4])

    records = await _history(service, uuid, limit=3)
    assert [r["seq"] for r in records] == [1, 2, 3, 4]
    assert [r.get("role") for r in records] == ["system", "user", "assistant", "tool"]

    payload = await service.request_payload(uuid)
    assert payload["temperature"] == 0.2
    assert [m["role"] for m in payload["messages"]] == ["system", "user", "assistant", "tool"]
    assert payload["tools"] == [READ_FILE]
    view = await service.get_context(uuid, format="anthropic")
    assert (view["format"], view["message_count"], view["last_seq"]) == ("anthropic", 4, 4)
    task = await service.get_task(uuid)
    assert task["statistics"]["llm_call_count"] == 1
    assert task["context"] is not None
    assert task["context"]["last_seq"] == 4

    assert (await service.stop_task(uuid))["status"] == "paused"
    with pytest.raises(ConflictError) as refused:
        await service.append(uuid, {"role": "user", "content": "while paused"})
    assert refused.value.code == "task_not_writable"
    assert (await service.resume_task(uuid))["status"] == "running"
    assert (await service.complete_task(uuid))["status"] == "completed"

    summary = await service.get_final_summary(uuid)
    deadline = time.monotonic() + WAIT_S
    while summary["status"] == "pending" and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        summary = await service.get_final_summary(uuid)
    assert summary["status"] == "ready"
    assert summary["summary"]
    jobs = (await service.list_jobs(task_uuid=uuid))["jobs"]
    assert [job["kind"] for job in jobs] == ["final_summary"]
    assert (await service.get_job(jobs[0]["id"]))["status"] == "succeeded"

    await service.delete_task(uuid)
    with pytest.raises(NotFoundError):
        await service.get_task(uuid)


async def test_a_create_sent_twice_is_one_task(service: AsyncContextClient) -> None:
    """The client gives every create a uuid, so a create sent again (a retry) is the same
    create: the service answers it with the task it made."""
    created = await service.create_task(task_key(), "gpt-4o")
    again = await service.create_task(task_key(), "gpt-4o", uuid=created["uuid"])
    assert again["uuid"] == created["uuid"]
    assert [t["uuid"] for t in (await service.list_tasks())["tasks"]] == [created["uuid"]]


async def test_tasks_are_listed_by_filter_and_by_page(service: AsyncContextClient) -> None:
    uuids = [
        (await service.create_task(task_key(task_id=str(n)), "gpt-4o", user=user))["uuid"]
        for n, user in enumerate(["alice", "bob", "alice"])
    ]
    await service.complete_task(uuids[2])
    failed = await service.fail_task(uuids[1], "the tests would not run")
    assert (failed["status"], failed["error_message"]) == ("failed", "the tests would not run")
    assert [t["uuid"] for t in (await service.list_tasks(status="failed"))["tasks"]] == [uuids[1]]
    alice = await service.list_tasks(user="alice")
    assert {t["uuid"] for t in alice["tasks"]} == {uuids[0], uuids[2]}
    running = await service.list_tasks(user="alice", status="running")
    assert [t["uuid"] for t in running["tasks"]] == [uuids[0]]

    first = await service.list_tasks(limit=2)
    assert first["next_cursor"] is not None
    rest = await service.list_tasks(limit=2, cursor=first["next_cursor"])
    listed = [t["uuid"] for t in first["tasks"] + rest["tasks"]]
    assert sorted(listed) == sorted(uuids)
    assert len(set(listed)) == 3


async def test_errors_carry_the_services_status_code_and_message(
    service: AsyncContextClient,
) -> None:
    """404, 422 and 409 as exceptions with the service's code, message and details; nothing
    refused was written."""
    with pytest.raises(NotFoundError) as unknown:
        await service.get_task(UNKNOWN_UUID)
    assert (unknown.value.status, unknown.value.code) == (404, "task_not_found")
    assert UNKNOWN_UUID in unknown.value.message

    uuid = (await service.create_task(task_key(), "gpt-4o"))["uuid"]
    with pytest.raises(ValidationError) as invalid:
        await service.append(uuid, {"role": "tool", "tool_call_id": "call_9", "content": "x"})
    assert (invalid.value.status, invalid.value.code) == (422, "unknown_tool_call")
    assert invalid.value.details["tool_call_id"] == "call_9"
    with pytest.raises(ValidationError) as malformed:
        await service.create_task(task_key(), "")
    assert malformed.value.code == "validation_error"
    assert "model" in malformed.value.message

    await service.append(uuid, CALL)
    with pytest.raises(ConflictError) as pending:
        await service.append(uuid, {"role": "user", "content": "meanwhile"})
    assert (pending.value.status, pending.value.code) == (409, "tool_results_pending")
    assert pending.value.details["open"] == ["call_1"]
    assert (await service.list_messages(uuid))["last_seq"] == 1
    assert [t["uuid"] for t in (await service.list_tasks())["tasks"]] == [uuid]


async def test_an_append_repeated_with_its_key_is_appended_once(
    service: AsyncContextClient,
) -> None:
    uuid = (await service.create_task(task_key(), "gpt-4o"))["uuid"]
    message: ChatMessage = {"role": "user", "content": "once"}
    first = await service.append(uuid, message, idempotency_key="turn-1")
    again = await service.append(uuid, message, idempotency_key="turn-1")
    assert first["seqs"] == again["seqs"] == [1]
    with pytest.raises(ValidationError) as reused:
        await service.append(uuid, {"role": "user", "content": "other"}, idempotency_key="turn-1")
    assert reused.value.code == "idempotency_key_reused"
    assert [r["seq"] for r in (await service.list_messages(uuid))["messages"]] == [1]


async def test_threads_planning_tool_records_and_compaction(service: AsyncContextClient) -> None:
    uuid = (await service.create_task(task_key(), "gpt-4o", system_prompt="sys"))["uuid"]
    for n in range(4):
        await service.append(uuid, {"role": "user", "content": f"question {n} " * 40})
        await service.append(uuid, {"role": "assistant", "content": f"answer {n} " * 40})

    thread = await service.start_thread(uuid, label="subtask")
    thread_id = thread["thread_id"]
    await service.append(uuid, {"role": "user", "content": "inside"}, thread_id=thread_id)
    inside = await service.list_messages(uuid, thread_id=thread_id)
    assert [r.get("content") for r in inside["messages"]] == ["inside"]
    tree = await service.thread_tree(uuid)
    assert [(c["thread_id"], c["message_count"]) for c in tree["children"]] == [(thread_id, 1)]
    assert (await service.get_thread(uuid, thread_id))["label"] == "subtask"
    ended = await service.end_thread(uuid, thread_id, generate_chronicle=False)
    assert ended["status"] == "completed"

    entry = await service.add_plan_entry(
        uuid, "initial", items=[{"text": "read"}, {"text": "fix", "status": "active"}]
    )
    plans = await service.list_plan_entries(uuid)
    assert plans["current_entry_id"] == entry["id"]
    assert [(i["id"], i["status"]) for i in plans["current_items"]] == [
        ("1", "pending"),
        ("2", "active"),
    ]
    record = await service.add_tool_record(uuid, "read_file", args={"path": "a.py"}, result="x")
    assert (await service.list_tool_records(uuid))["tools"] == [record]

    truncated = await service.compress(uuid, strategy="truncate")
    assert truncated["kind"] == "truncation"
    assert truncated["hidden_messages"] > 0
    summaries = (await service.list_summaries(uuid))["summaries"]
    assert [s["id"] for s in summaries] == [truncated["summary_id"]]
    rewound = await service.rewind(uuid, 3)
    assert rewound["last_seq"] > 3  # the rewind marker follows the history


async def test_statistics_and_inheritance(service: AsyncContextClient) -> None:
    """/stats counts the LLM calls and tokens the appends reported; a second run of a key
    inherits from the first."""
    first = (await service.create_task(task_key(), "gpt-4o", user="alice"))["uuid"]
    await service.append(first, {"role": "user", "content": "go"})
    await service.append(first, {"role": "assistant", "content": "done", "usage": CALL["usage"]})
    await service.complete_task(first)
    stats = await service.get_stats(user="alice")
    assert stats["calls"]["llm_calls"] == 1
    assert stats["tokens"]["all"]["total"] == 128
    assert stats["by_status"]["completed"] == 1

    candidates = await service.inheritance_candidates(task_key(), user="alice")
    assert [c["uuid"] for c in candidates["candidates"]] == [first]
    second = await service.create_task(task_key(), "gpt-4o", user="alice")
    assert second["inherited_from"] == first
    inherited = await service.get_inheritance(second["uuid"])
    assert inherited["inheritance"] is not None
    assert inherited["inheritance"]["from_uuid"] == first


@pytest.fixture
async def keyed_app(tmp_path: Path) -> AsyncIterator[FastAPI]:
    """The real app with an agent key and an admin key."""
    keys = {"agent": {"key": AGENT_KEY}, "admin": {"key": ADMIN_KEY, "role": "admin"}}
    settings = fast_settings(tmp_path / "contexts", auth={"api_keys": keys})
    async with lifespan_of(create_app(settings)) as started:
        yield started  # type: ignore[misc]


async def test_the_api_key_is_sent_from_the_argument_or_the_environment(
    keyed_app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    def client(api_key: str | None = None) -> AsyncContextClient:
        return AsyncContextClient("http://test", api_key, transport=httpx.ASGITransport(keyed_app))

    monkeypatch.delenv("CONTEXT_SERVICE_API_KEY", raising=False)
    async with client() as anonymous:
        with pytest.raises(AuthenticationError) as refused:
            await anonymous.list_tasks()
    assert (refused.value.status, refused.value.code) == (401, "unauthorized")

    async with client(AGENT_KEY) as agent:
        uuid = (await agent.create_task(task_key(), "gpt-4o"))["uuid"]
        with pytest.raises(PermissionDeniedError) as not_admin:
            await agent.delete_task(uuid)
    assert not_admin.value.code == "admin_key_required"

    monkeypatch.setenv("CONTEXT_SERVICE_API_KEY", ADMIN_KEY)
    async with client() as admin:
        await admin.delete_task(uuid)
        assert (await admin.list_tasks())["tasks"] == []


def test_the_url_comes_from_the_argument_the_environment_or_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CONTEXT_SERVICE_URL", raising=False)
    with ContextClient() as default:
        assert default.base_url == "http://127.0.0.1:8080"
    monkeypatch.setenv("CONTEXT_SERVICE_URL", "http://context.internal:9000")
    with ContextClient() as configured, ContextClient("http://other:1") as given:
        assert configured.base_url == "http://context.internal:9000"
        assert given.base_url == "http://other:1"
