"""POST/GET /tasks, the task lifecycle and deletion, through the real app (SQLite + files)."""

import base64
import json
import math
import uuid as uuid_module
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_error
from tests.support.files import locations, paths_naming, read_jsonl, task_dir
from tests.support.tasks import create_task, key, task_body
from tests.support.timestamps import parse_utc

STATUSES = ("running", "paused", "completed", "failed")
ACTIONS = ("stop", "resume", "complete", "fail")
# action -> (statuses it may start from, status it leads to); failed tasks live in completed/.
VALID = {
    "stop": ({"running"}, "paused"),
    "resume": ({"paused"}, "running"),
    "complete": ({"running", "paused"}, "completed"),
    "fail": ({"running", "paused"}, "failed"),
}
DIR_OF = {"running": "running", "paused": "paused", "completed": "completed", "failed": "completed"}


async def act(client: httpx.AsyncClient, task_uuid: str, action: str) -> httpx.Response:
    """POST one lifecycle action (fail carries an error message)."""
    body = {"error_message": "the build broke"} if action == "fail" else None
    return await client.post(f"/tasks/{task_uuid}/{action}", json=body)


async def bring_to(client: httpx.AsyncClient, task_uuid: str, status: str) -> None:
    """Move a running task to `status` through valid transitions."""
    path = {"running": [], "paused": ["stop"], "completed": ["complete"], "failed": ["fail"]}
    for action in path[status]:
        response = await act(client, task_uuid, action)
        assert response.status_code == 200, response.text
    assert (await client.get(f"/tasks/{task_uuid}")).json()["status"] == status


# -- create -------------------------------------------------------------------------------


async def test_create_returns_201_with_generated_uuid(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """Without a uuid the service generates one (canonical form) and answers 201 with the task."""
    response = await client.post("/tasks", json=task_body())
    assert response.status_code == 201, response.text
    task = response.json()
    generated = task["uuid"]
    assert generated == str(uuid_module.UUID(generated))
    assert task["status"] == "running"
    assert task["task_key"] == key()
    assert task["user"] == "notfolder"
    assert task["model"] == "gpt-4o"
    assert task["llm_provider"] == "openai"
    assert task["context_length"] == 128000
    assert task["max_output_tokens"] == 4096
    assert task["inheritance"] is None
    assert task["notification_comment"] is None
    assert task["completed_at"] is None
    assert task["error_message"] is None
    parse_utc(task["created_at"])
    assert locations(context_dir, generated) == ["running"]


async def test_two_creates_without_uuid_get_distinct_uuids(client: httpx.AsyncClient) -> None:
    """Each uuid-less POST creates its own task."""
    first = await create_task(client)
    second = await create_task(client)
    assert first["uuid"] != second["uuid"]


@pytest.mark.parametrize(
    "spelling",
    [
        "550E8400-E29B-41D4-A716-446655440000",
        "550e8400e29b41d4a716446655440000",
        "{550e8400-e29b-41d4-a716-446655440000}",
    ],
)
async def test_uuid_is_normalised_to_canonical_lowercase(
    client: httpx.AsyncClient, context_dir: Path, spelling: str
) -> None:
    """Any accepted spelling of a uuid becomes the canonical lowercase form, in row and path."""
    canonical = "550e8400-e29b-41d4-a716-446655440000"
    task = await create_task(client, uuid=spelling)
    assert task["uuid"] == canonical
    assert locations(context_dir, canonical) == ["running"]
    assert (await client.get(f"/tasks/{canonical}")).status_code == 200
    # Re-POSTing with the canonical spelling is the same task.
    again = await client.post("/tasks", json=task_body(uuid=canonical))
    assert again.status_code == 200
    assert again.json()["uuid"] == canonical


async def test_metadata_json_holds_the_seed_fields(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """metadata.json is written at creation with the seeds' field names and the model profile."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ]
    task = await create_task(
        client,
        tools=tools,
        request_defaults={"temperature": 0.2},
        system_prompt="You are a coding agent.",
    )
    metadata = json.loads((context_dir / "running" / task["uuid"] / "metadata.json").read_text())
    assert metadata["uuid"] == task["uuid"]
    assert metadata["task_key"] == key()
    assert metadata["user"] == "notfolder"
    assert parse_utc(metadata["created_at"]) == parse_utc(task["created_at"])
    assert metadata["task_type"] == "issue"
    assert metadata["task_identifier"] == "27"
    assert metadata["repository"] == "notfolder/coding_agent"
    config = metadata["config"]
    assert config["llm_provider"] == "openai"
    assert config["model"] == "gpt-4o"
    assert config["context_length"] == 128000
    assert config["max_output_tokens"] == 4096
    assert metadata["tools"] == tools
    assert metadata["request_defaults"] == {"temperature": 0.2}


async def test_system_prompt_becomes_seq_1(client: httpx.AsyncClient, context_dir: Path) -> None:
    """The system prompt is the first message of the history (seq 1) and of the payload."""
    task = await create_task(client, system_prompt="You are a coding agent.")
    history = (await client.get(f"/tasks/{task['uuid']}/messages")).json()
    assert [(m["seq"], m["role"], m["content"]) for m in history["messages"]] == [
        (1, "system", "You are a coding agent.")
    ]
    assert history["last_seq"] == 1
    assert task["context"]["last_seq"] == 1
    assert task["context"]["messages"] == 1
    records = read_jsonl(context_dir / "running" / task["uuid"] / "messages.jsonl")
    assert [r["seq"] for r in records] == [1]
    current = read_jsonl(context_dir / "running" / task["uuid"] / "current.jsonl")
    assert current == [{"role": "system", "content": "You are a coding agent."}]


async def test_without_system_prompt_the_context_is_empty(client: httpx.AsyncClient) -> None:
    """No system prompt: no message, last_seq 0."""
    task = await create_task(client)
    assert task["context"]["messages"] == 0
    assert task["context"]["last_seq"] == 0
    history = (await client.get(f"/tasks/{task['uuid']}/messages")).json()
    assert history == {"messages": [], "last_seq": 0, "next_after_seq": None}


@pytest.mark.parametrize(
    ("window", "reserved"),
    [(128000, 8192), (10001, 2000), (2048, 409), (1024, 204)],
)
async def test_default_budget_numbers(
    client: httpx.AsyncClient, window: int, reserved: int
) -> None:
    """Without max_output_tokens: reserved = min(8192, window/5); budget and threshold floor."""
    body = task_body(context_length=window)
    del body["max_output_tokens"]
    response = await client.post("/tasks", json=body)
    assert response.status_code == 201, response.text
    task = response.json()
    assert task["max_output_tokens"] == reserved
    context = task["context"]
    assert context["window"] == window
    assert context["reserved_output"] == reserved
    assert context["budget"] == math.floor(window * 0.9) - reserved
    assert context["threshold"] == math.floor(window * 0.7)
    fetched = (await client.get(f"/tasks/{task['uuid']}")).json()["context"]
    assert fetched == context


async def test_explicit_max_output_tokens_sets_the_budget(client: httpx.AsyncClient) -> None:
    """An explicit max_output_tokens is the reserved output: budget = floor(0.9 w) - reserved."""
    task = await create_task(client, context_length=10001, max_output_tokens=1234)
    assert task["context"]["reserved_output"] == 1234
    assert task["context"]["budget"] == 9000 - 1234
    assert task["context"]["threshold"] == 7000


async def test_idempotent_repost_duplicates_nothing(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """Same uuid + same body: 200 with the same task; still exactly one message, one dir."""
    body = task_body(uuid=str(uuid_module.uuid4()), system_prompt="You are a coding agent.")
    first = await client.post("/tasks", json=body)
    assert first.status_code == 201
    again = await client.post("/tasks", json=body)
    assert again.status_code == 200, again.text
    assert again.json()["uuid"] == first.json()["uuid"]
    assert again.json()["created_at"] == first.json()["created_at"]
    task_uuid = first.json()["uuid"]
    history = (await client.get(f"/tasks/{task_uuid}/messages")).json()
    assert len(history["messages"]) == 1
    assert again.json()["statistics"]["total_messages"] == 1
    assert len(read_jsonl(task_dir(context_dir, task_uuid) / "messages.jsonl")) == 1
    listed = (await client.get("/tasks")).json()["tasks"]
    assert [t["uuid"] for t in listed] == [task_uuid]


async def test_repost_with_different_body_is_409(client: httpx.AsyncClient) -> None:
    """Same uuid, different body: 409 task_exists, and the original task is unchanged."""
    task_uuid = str(uuid_module.uuid4())
    await create_task(client, uuid=task_uuid, model="gpt-4o")
    response = await client.post("/tasks", json=task_body(uuid=task_uuid, model="gpt-4.1"))
    assert_error(response, 409, "task_exists")
    assert (await client.get(f"/tasks/{task_uuid}")).json()["model"] == "gpt-4o"


# -- list ---------------------------------------------------------------------------------


async def test_list_filters(client: httpx.AsyncClient) -> None:
    """Every filter of GET /tasks selects exactly the tasks that match it."""
    base = await create_task(client)
    by_user = await create_task(client, user="alice")
    by_source = await create_task(client, task_key=key(task_source="gitlab"))
    by_owner = await create_task(client, task_key=key(owner="other"))
    by_repo = await create_task(client, task_key=key(repo="other_repo"))
    by_type = await create_task(client, task_key=key(task_type="pull_request"))
    by_id = await create_task(client, task_key=key(task_id="99"))
    paused = await create_task(client)
    await bring_to(client, paused["uuid"], "paused")
    everything = {
        t["uuid"] for t in (base, by_user, by_source, by_owner, by_repo, by_type, by_id, paused)
    }

    async def listed(**params: str) -> set[str]:
        response = await client.get("/tasks", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        assert page["next_cursor"] is None
        return {t["uuid"] for t in page["tasks"]}

    assert await listed() == everything
    assert await listed(user="alice") == {by_user["uuid"]}
    assert await listed(user="notfolder") == everything - {by_user["uuid"]}
    assert await listed(task_source="gitlab") == {by_source["uuid"]}
    assert await listed(owner="other") == {by_owner["uuid"]}
    assert await listed(repo="other_repo") == {by_repo["uuid"]}
    assert await listed(task_type="pull_request") == {by_type["uuid"]}
    assert await listed(task_id="99") == {by_id["uuid"]}
    assert await listed(status="paused") == {paused["uuid"]}
    assert await listed(status="running") == everything - {paused["uuid"]}
    assert await listed(status="completed") == set()
    assert await listed(owner="notfolder", repo="coding_agent", task_id="27") == everything - {
        by_owner["uuid"],
        by_repo["uuid"],
        by_id["uuid"],
    }
    assert await listed(user="nobody") == set()


async def test_list_rejects_unknown_status(client: httpx.AsyncClient) -> None:
    """status must be one of the four statuses."""
    assert_error(await client.get("/tasks", params={"status": "done"}), 422, "validation_error")


async def test_list_created_range(client: httpx.AsyncClient) -> None:
    """created_after is inclusive, created_before exclusive; both together select a range."""
    created = [await create_task(client) for _ in range(5)]
    uuids = [t["uuid"] for t in created]
    stamps = [t["created_at"] for t in created]
    assert stamps == sorted(stamps, key=parse_utc)

    async def listed(**params: str) -> list[str]:
        response = await client.get("/tasks", params=params)
        assert response.status_code == 200, response.text
        return [t["uuid"] for t in response.json()["tasks"]]

    assert await listed(created_after=stamps[2]) == uuids[:1:-1]
    assert await listed(created_before=stamps[2]) == uuids[1::-1]
    assert await listed(created_after=stamps[1], created_before=stamps[4]) == uuids[3:0:-1]
    assert await listed(created_after="2000-01-01T00:00:00Z") == uuids[::-1]
    assert await listed(created_before="2000-01-01T00:00:00Z") == []


async def test_list_created_range_accepts_a_timestamp_without_zone(
    client: httpx.AsyncClient,
) -> None:
    """A created_after/created_before without a zone is read as UTC, not a server error."""
    task = await create_task(client)
    response = await client.get("/tasks", params={"created_after": "2000-01-01T00:00:00"})
    assert response.status_code == 200, response.text
    assert [t["uuid"] for t in response.json()["tasks"]] == [task["uuid"]]
    response = await client.get("/tasks", params={"created_before": "2000-01-01T00:00:00"})
    assert response.status_code == 200, response.text
    assert response.json()["tasks"] == []


async def test_keyset_pagination_sees_every_task_once_newest_first(
    client: httpx.AsyncClient,
) -> None:
    """limit=3 over 7 tasks: pages of 3, 3, 1, each task once, newest first, then no cursor."""
    created = [(await create_task(client))["uuid"] for _ in range(7)]
    seen: list[str] = []
    stamps: list[datetime] = []
    sizes: list[int] = []
    cursor: str | None = None
    for _ in range(10):  # bounded: 3 pages are expected
        params: dict[str, Any] = {"limit": 3}
        if cursor is not None:
            params["cursor"] = cursor
        response = await client.get("/tasks", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        sizes.append(len(page["tasks"]))
        seen += [t["uuid"] for t in page["tasks"]]
        stamps += [parse_utc(t["created_at"]) for t in page["tasks"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sizes == [3, 3, 1]
    assert seen == created[::-1]
    assert len(set(seen)) == 7
    assert stamps == sorted(stamps, reverse=True)


async def test_pagination_combines_with_filters(client: httpx.AsyncClient) -> None:
    """The cursor keeps the filter's selection: only matching tasks, each once."""
    alice = [(await create_task(client, user="alice"))["uuid"] for _ in range(3)]
    for _ in range(2):
        await create_task(client, user="bob")
    first = (await client.get("/tasks", params={"user": "alice", "limit": 2})).json()
    assert [t["uuid"] for t in first["tasks"]] == alice[:0:-1]
    second = await client.get(
        "/tasks", params={"user": "alice", "limit": 2, "cursor": first["next_cursor"]}
    )
    assert [t["uuid"] for t in second.json()["tasks"]] == alice[:1]
    assert second.json()["next_cursor"] is None


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "!!!not-base64!!!",
        _b64("no separator"),
        _b64("a|b|c"),
        _b64("not-a-date|550e8400-e29b-41d4-a716-446655440000"),
        _b64("2024-01-01T00:00:00|550e8400-e29b-41d4-a716-446655440000"),
        base64.urlsafe_b64encode(b"\xff\xfe|x").decode(),
    ],
)
async def test_invalid_cursor_is_422(client: httpx.AsyncClient, cursor: str) -> None:
    """A cursor the service did not issue is 422 invalid_cursor, never a server error."""
    await create_task(client)
    assert_error(await client.get("/tasks", params={"cursor": cursor}), 422, "invalid_cursor")


@pytest.mark.parametrize("limit", [0, 1001, -1])
async def test_list_limit_bounds(client: httpx.AsyncClient, limit: int) -> None:
    """limit outside 1..1000 is 422."""
    assert_error(await client.get("/tasks", params={"limit": limit}), 422, "validation_error")


# -- read ---------------------------------------------------------------------------------


async def test_get_task_has_statistics_and_context(client: httpx.AsyncClient) -> None:
    """GET /tasks/{uuid}: statistics count what was appended; context agrees with /context."""
    task = await create_task(client, system_prompt="You are a coding agent.")
    task_uuid = task["uuid"]
    fresh = (await client.get(f"/tasks/{task_uuid}")).json()
    assert fresh["statistics"] == {
        "total_messages": 1,
        "llm_call_count": 0,
        "tool_call_count": 0,
        "total_tokens": 0,
        "compression_count": 0,
        "total_summaries": 0,
        "final_token_count": None,
        "final_message_count": None,
    }
    messages = [
        {"role": "user", "content": "Fix the bug in a.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                }
            ],
            "usage": {"prompt_tokens": 120, "completion_tokens": 15},
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "def main(): ..."},
    ]
    appended = await client.post(f"/tasks/{task_uuid}/messages", json={"messages": messages})
    assert appended.status_code == 201, appended.text
    got = (await client.get(f"/tasks/{task_uuid}")).json()
    stats = got["statistics"]
    assert stats["total_messages"] == 4
    assert stats["llm_call_count"] == 1
    assert stats["tool_call_count"] == 1
    assert stats["total_tokens"] == 135
    context = got["context"]
    assert context["messages"] == 4
    assert context["last_seq"] == 4
    assert context["window"] == 128000
    assert context["reserved_output"] == 4096
    assert context["budget"] == 115200 - 4096
    assert context["threshold"] == 89600
    overview = (await client.get(f"/tasks/{task_uuid}/context")).json()
    assert context["tokens"] == overview["tokens"]
    assert context["tokens"] > fresh["context"]["tokens"]


async def test_unknown_task_is_404(client: httpx.AsyncClient) -> None:
    """Every task endpoint answers 404 task_not_found for a uuid that does not exist."""
    missing = str(uuid_module.uuid4())
    assert_error(await client.get(f"/tasks/{missing}"), 404, "task_not_found")
    for action in ACTIONS:
        assert_error(await act(client, missing, action), 404, "task_not_found")
    assert_error(await client.delete(f"/tasks/{missing}"), 404, "task_not_found")


async def test_non_uuid_path_is_422(client: httpx.AsyncClient) -> None:
    """A path segment that is not a uuid is a validation error, never a file path."""
    assert_error(await client.get("/tasks/not-a-uuid"), 422, "validation_error")
    assert_error(await client.get("/tasks/12345/messages"), 422, "validation_error")


# -- lifecycle ----------------------------------------------------------------------------


async def test_lifecycle_stop_resume_complete(client: httpx.AsyncClient, context_dir: Path) -> None:
    """stop -> paused (paused/), resume -> running (running/), complete -> completed/."""
    task = await create_task(client, system_prompt="You are a coding agent.")
    task_uuid = task["uuid"]
    await client.post(f"/tasks/{task_uuid}/messages", json={"role": "user", "content": "Go"})

    stopped = await act(client, task_uuid, "stop")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["status"] == "paused"
    assert locations(context_dir, task_uuid) == ["paused"]

    resumed = await act(client, task_uuid, "resume")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["status"] == "running"
    assert resumed.json()["completed_at"] is None
    assert locations(context_dir, task_uuid) == ["running"]

    before = (await client.get(f"/tasks/{task_uuid}")).json()["context"]
    completed = await act(client, task_uuid, "complete")
    assert completed.status_code == 200, completed.text
    done = completed.json()
    assert done["status"] == "completed"
    assert parse_utc(done["completed_at"]) >= parse_utc(done["created_at"])
    assert done["statistics"]["final_token_count"] == before["tokens"]
    assert done["statistics"]["final_message_count"] == before["messages"] == 2
    assert done["error_message"] is None
    assert locations(context_dir, task_uuid) == ["completed"]
    # The files moved with the directory and are still served.
    again = (await client.get(f"/tasks/{task_uuid}")).json()
    assert again["status"] == "completed"
    assert again["statistics"]["final_token_count"] == before["tokens"]
    history = (await client.get(f"/tasks/{task_uuid}/messages")).json()
    assert [m["seq"] for m in history["messages"]] == [1, 2]


@pytest.mark.parametrize("start", ["running", "paused"])
async def test_fail_stores_error_and_moves_to_completed(
    client: httpx.AsyncClient, context_dir: Path, start: str
) -> None:
    """fail {error_message} -> failed; the error is stored; the dir lives in completed/."""
    task = await create_task(client, system_prompt="You are a coding agent.")
    task_uuid = task["uuid"]
    await bring_to(client, task_uuid, start)
    response = await client.post(
        f"/tasks/{task_uuid}/fail", json={"error_message": "tests kept failing"}
    )
    assert response.status_code == 200, response.text
    failed = response.json()
    assert failed["status"] == "failed"
    assert failed["error_message"] == "tests kept failing"
    assert failed["completed_at"] is not None
    assert failed["statistics"]["final_message_count"] == 1
    assert failed["statistics"]["final_token_count"] == task["context"]["tokens"]
    assert locations(context_dir, task_uuid) == ["completed"]
    fetched = (await client.get(f"/tasks/{task_uuid}")).json()
    assert fetched["error_message"] == "tests kept failing"
    assert fetched["status"] == "failed"
    listed = (await client.get("/tasks", params={"status": "failed"})).json()["tasks"]
    assert [t["uuid"] for t in listed] == [task_uuid]


async def test_fail_needs_an_error_message(client: httpx.AsyncClient, task: dict[str, Any]) -> None:
    """fail without error_message is 422 and leaves the task running."""
    assert_error(await client.post(f"/tasks/{task['uuid']}/fail", json={}), 422, "validation_error")
    assert (await client.get(f"/tasks/{task['uuid']}")).json()["status"] == "running"


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("action", ACTIONS)
async def test_transition_table(
    client: httpx.AsyncClient, context_dir: Path, action: str, status: str
) -> None:
    """Every action from every status: the valid ones move status and dir, the rest are 409."""
    task = await create_task(client, system_prompt="You are a coding agent.")
    task_uuid = task["uuid"]
    await bring_to(client, task_uuid, status)
    sources, target = VALID[action]
    response = await act(client, task_uuid, action)
    if status in sources:
        assert response.status_code == 200, response.text
        assert response.json()["status"] == target
        assert locations(context_dir, task_uuid) == [DIR_OF[target]]
    else:
        details = assert_error(response, 409, "invalid_transition")
        assert details["action"] == action
        assert details["status"] == status
        after = (await client.get(f"/tasks/{task_uuid}")).json()
        assert after["status"] == status
        assert locations(context_dir, task_uuid) == [DIR_OF[status]]


async def test_paused_task_is_read_only(client: httpx.AsyncClient, context_dir: Path) -> None:
    """A paused task rejects appends (409 task_not_writable) but still serves its reads."""
    task = await create_task(client, system_prompt="You are a coding agent.")
    task_uuid = task["uuid"]
    await client.post(f"/tasks/{task_uuid}/messages", json={"role": "user", "content": "Fix it"})
    await bring_to(client, task_uuid, "paused")
    files_before = sorted(p.name for p in task_dir(context_dir, task_uuid).iterdir())
    messages_before = (task_dir(context_dir, task_uuid) / "messages.jsonl").read_bytes()

    rejected = await client.post(
        f"/tasks/{task_uuid}/messages", json={"role": "user", "content": "More"}
    )
    details = assert_error(rejected, 409, "task_not_writable")
    assert details["status"] == "paused"
    batch = await client.post(
        f"/tasks/{task_uuid}/messages", json={"messages": [{"role": "user", "content": "x"}]}
    )
    assert_error(batch, 409, "task_not_writable")
    assert (task_dir(context_dir, task_uuid) / "messages.jsonl").read_bytes() == messages_before
    assert sorted(p.name for p in task_dir(context_dir, task_uuid).iterdir()) == files_before

    payload = await client.get(f"/tasks/{task_uuid}/request")
    assert payload.status_code == 200, payload.text
    assert [m["role"] for m in payload.json()["messages"]] == ["system", "user"]
    history = await client.get(f"/tasks/{task_uuid}/messages")
    assert history.status_code == 200
    assert [m["seq"] for m in history.json()["messages"]] == [1, 2]
    assert (await client.get(f"/tasks/{task_uuid}/context")).status_code == 200


@pytest.mark.parametrize("status", ["completed", "failed"])
async def test_finished_task_rejects_appends(
    client: httpx.AsyncClient, task: dict[str, Any], status: str
) -> None:
    """Completed and failed tasks take no more messages (409 task_not_writable)."""
    await bring_to(client, task["uuid"], status)
    response = await client.post(
        f"/tasks/{task['uuid']}/messages", json={"role": "user", "content": "More"}
    )
    assert_error(response, 409, "task_not_writable")


# -- delete -------------------------------------------------------------------------------


@pytest.mark.parametrize("status", STATUSES)
async def test_delete_removes_row_and_directory(
    client: httpx.AsyncClient, context_dir: Path, status: str
) -> None:
    """DELETE -> 204; then 404 everywhere, no directory anywhere; a second DELETE is 404."""
    task = await create_task(client, system_prompt="You are a coding agent.")
    other = await create_task(client)
    task_uuid = task["uuid"]
    await client.post(f"/tasks/{task_uuid}/messages", json={"role": "user", "content": "Go"})
    await bring_to(client, task_uuid, status)
    assert locations(context_dir, task_uuid) == [DIR_OF[status]]

    response = await client.delete(f"/tasks/{task_uuid}")
    assert response.status_code == 204
    assert response.content == b""
    assert locations(context_dir, task_uuid) == []
    assert paths_naming(context_dir, task_uuid) == []  # its lock file went with it
    assert_error(await client.get(f"/tasks/{task_uuid}"), 404, "task_not_found")
    assert_error(await client.get(f"/tasks/{task_uuid}/messages"), 404, "task_not_found")
    assert_error(await client.delete(f"/tasks/{task_uuid}"), 404, "task_not_found")
    listed = (await client.get("/tasks")).json()["tasks"]
    assert [t["uuid"] for t in listed] == [other["uuid"]]
    assert locations(context_dir, other["uuid"]) == ["running"]


async def test_deleted_uuid_can_be_created_again(client: httpx.AsyncClient) -> None:
    """After a delete, the same uuid is free: a new create is 201 with a fresh context."""
    task_uuid = str(uuid_module.uuid4())
    await create_task(client, uuid=task_uuid, system_prompt="first")
    assert (await client.delete(f"/tasks/{task_uuid}")).status_code == 204
    again = await create_task(client, uuid=task_uuid, system_prompt="second")
    assert again["context"]["last_seq"] == 1
    history = (await client.get(f"/tasks/{task_uuid}/messages")).json()
    assert [m["content"] for m in history["messages"]] == ["second"]
