"""Tool execution records (tools.jsonl) and planning history (planning.jsonl)."""

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import snapshot_dir
from tests.support.tasks import assert_error, create_task, read_jsonl, task_dir


def assert_utc(value: str) -> None:
    """An ISO 8601 timestamp in UTC."""
    offset = datetime.fromisoformat(value.replace("Z", "+00:00")).utcoffset()
    assert offset is not None
    assert offset.total_seconds() == 0


async def post_tool(client: httpx.AsyncClient, task_uuid: str, body: dict[str, Any]) -> Any:
    """POST /tools; asserts 201 and returns the record."""
    response = await client.post(f"/tasks/{task_uuid}/tools", json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def post_plan(client: httpx.AsyncClient, task_uuid: str, body: dict[str, Any]) -> Any:
    """POST /planning; asserts 201 and returns the entry."""
    response = await client.post(f"/tasks/{task_uuid}/planning", json=body)
    assert response.status_code == 201, response.text
    return response.json()


# -- tools --------------------------------------------------------------------------------


async def test_tool_records_are_numbered_with_seed_fields(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path
) -> None:
    """POST /tools returns the record with seq 1, 2, 3 and seed 001 §3.6's fields; the same
    records land in tools.jsonl in the task directory."""
    task_uuid = task["uuid"]
    success = await post_tool(
        client,
        task_uuid,
        {
            "tool": "read_file",
            "args": {"path": "a.py"},
            "result": "def main(): ...",
            "status": "success",
            "duration_ms": 234,
            "tool_call_id": "call_1",
        },
    )
    assert success["seq"] == 1
    assert success["tool"] == "read_file"
    assert success["args"] == {"path": "a.py"}
    assert success["result"] == "def main(): ..."
    assert success["status"] == "success"
    assert success["duration_ms"] == 234
    assert success["tool_call_id"] == "call_1"
    assert_utc(success["timestamp"])

    failure = await post_tool(
        client,
        task_uuid,
        {
            "tool": "run_tests",
            "args": {},
            "status": "error",
            "error": "exit code 1",
            "duration_ms": 5000,
        },
    )
    assert failure["seq"] == 2
    assert failure["status"] == "error"
    assert failure["error"] == "exit code 1"
    assert failure["duration_ms"] == 5000

    aliased = await post_tool(
        client, task_uuid, {"tool_name": "list_dir", "arguments": {"path": "src"}}
    )
    assert aliased["seq"] == 3
    assert aliased["tool"] == "list_dir"
    assert aliased["args"] == {"path": "src"}
    assert aliased["status"] == "success"

    on_disk = read_jsonl(task_dir(context_dir, task_uuid) / "tools.jsonl")
    assert on_disk == [success, failure, aliased]
    assert (context_dir / "running" / task_uuid / "tools.jsonl").is_file()
    listed = (await client.get(f"/tasks/{task_uuid}/tools")).json()
    assert listed == {"tools": [success, failure, aliased], "next_after_seq": None}


async def test_tool_records_page_by_after_seq(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    """GET /tools pages by after_seq/limit; chaining next_after_seq visits every record once."""
    task_uuid = task["uuid"]
    assert (await client.get(f"/tasks/{task_uuid}/tools")).json() == {
        "tools": [],
        "next_after_seq": None,
    }
    for i in range(7):
        await post_tool(client, task_uuid, {"tool": f"tool_{i}", "args": {"i": i}})
    seqs: list[int] = []
    after = 0
    for _ in range(10):  # bounded: 3 pages are expected
        response = await client.get(
            f"/tasks/{task_uuid}/tools", params={"after_seq": after, "limit": 3}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        seqs += [r["seq"] for r in page["tools"]]
        assert all(r["tool"] == f"tool_{r['seq'] - 1}" for r in page["tools"])
        if page["next_after_seq"] is None:
            break
        assert page["next_after_seq"] == page["tools"][-1]["seq"]
        after = page["next_after_seq"]
    assert seqs == list(range(1, 8))
    middle = (await client.get(f"/tasks/{task_uuid}/tools", params={"after_seq": 4})).json()
    assert [r["seq"] for r in middle["tools"]] == [5, 6, 7]
    assert middle["next_after_seq"] is None


async def test_concurrent_tool_posts_get_unique_gapless_seqs(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path
) -> None:
    """50 concurrent POSTs to one task's tools get seqs 1..50, each exactly once, on disk too."""
    task_uuid = task["uuid"]
    responses = await asyncio.gather(
        *(
            client.post(f"/tasks/{task_uuid}/tools", json={"tool": "worker", "args": {"n": n}})
            for n in range(50)
        )
    )
    assert all(r.status_code == 201 for r in responses), [r.text for r in responses]
    by_n = {r.json()["args"]["n"]: r.json()["seq"] for r in responses}
    assert sorted(by_n.values()) == list(range(1, 51))
    on_disk = read_jsonl(task_dir(context_dir, task_uuid) / "tools.jsonl")
    assert [r["seq"] for r in on_disk] == list(range(1, 51))
    assert {r["args"]["n"]: r["seq"] for r in on_disk} == by_n
    listed = (await client.get(f"/tasks/{task_uuid}/tools", params={"limit": 1000})).json()
    assert [r["seq"] for r in listed["tools"]] == list(range(1, 51))


@pytest.mark.parametrize(
    "body",
    [
        {"tool": "read_file", "status": "done"},
        {"tool": "read_file", "status": "SUCCESS"},
        {"tool": ""},
        {"args": {}},
        {"tool": "read_file", "args": "not an object"},
        {"tool": "read_file", "duration_ms": -1},
    ],
)
async def test_invalid_tool_record_is_422_and_writes_nothing(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path, body: dict[str, Any]
) -> None:
    """An invalid status (or other invalid field) is 422 and changes no file."""
    before = snapshot_dir(context_dir)
    response = await client.post(f"/tasks/{task['uuid']}/tools", json=body)
    assert_error(response, 422, "validation_error")
    assert snapshot_dir(context_dir) == before


# -- planning -----------------------------------------------------------------------------


async def test_planning_entries_are_numbered_with_seed_fields(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path
) -> None:
    """POST /planning returns id 1, 2, 3 with plan_type, plan_content (text or JSON) and
    created_at; the entries land in planning.jsonl in the task directory."""
    task_uuid = task["uuid"]
    contents: list[Any] = [
        "1. Read a.py\n2. Fix the bug",
        {"steps": ["read", "fix", "test"], "done": 0},
        ["read", "fix"],
    ]
    entries = []
    for index, content in enumerate(contents, start=1):
        plan_type = "initial" if index == 1 else "revision"
        entry = await post_plan(
            client, task_uuid, {"plan_type": plan_type, "plan_content": content}
        )
        assert entry["id"] == index
        assert entry["plan_type"] == plan_type
        assert entry["plan_content"] == content
        assert_utc(entry["created_at"])
        assert set(entry) == {"id", "plan_type", "plan_content", "created_at"}
        entries.append(entry)
    on_disk = read_jsonl(task_dir(context_dir, task_uuid) / "planning.jsonl")
    assert on_disk == entries
    assert (context_dir / "running" / task_uuid / "planning.jsonl").is_file()
    listed = (await client.get(f"/tasks/{task_uuid}/planning")).json()
    assert listed == {
        "planning": entries,
        "next_after_id": None,
        "current_items": [],  # free-text entries set no checklist
        "current_entry_id": None,
    }


async def test_planning_pages_by_after_id(client: httpx.AsyncClient, task: dict[str, Any]) -> None:
    """GET /planning pages by after_id/limit; chaining next_after_id visits every entry once."""
    task_uuid = task["uuid"]
    for i in range(5):
        await post_plan(client, task_uuid, {"plan_type": "step", "plan_content": f"step {i}"})
    ids: list[int] = []
    after = 0
    for _ in range(10):  # bounded: 3 pages are expected
        response = await client.get(
            f"/tasks/{task_uuid}/planning", params={"after_id": after, "limit": 2}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        ids += [e["id"] for e in page["planning"]]
        if page["next_after_id"] is None:
            break
        assert page["next_after_id"] == page["planning"][-1]["id"]
        after = page["next_after_id"]
    assert ids == [1, 2, 3, 4, 5]
    tail = (await client.get(f"/tasks/{task_uuid}/planning", params={"after_id": 3})).json()
    assert [e["plan_content"] for e in tail["planning"]] == ["step 3", "step 4"]


@pytest.mark.parametrize(
    "body",
    [
        {"plan_content": "no type"},
        {"plan_type": "initial"},
        {"plan_type": "", "plan_content": "x"},
        {"plan_type": "initial", "plan_content": "x", "unexpected": 1},
        {"plan_type": "initial", "plan_content": 42},
    ],
)
async def test_invalid_planning_entry_is_422_and_writes_nothing(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path, body: dict[str, Any]
) -> None:
    """An invalid planning entry is 422 and changes no file."""
    before = snapshot_dir(context_dir)
    response = await client.post(f"/tasks/{task['uuid']}/planning", json=body)
    assert_error(response, 422, "validation_error")
    assert snapshot_dir(context_dir) == before


# -- both journals ------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "param"), [("tools", "after_seq"), ("planning", "after_id")])
@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 1001}, {"after": -1}])
async def test_journal_paging_bounds(
    client: httpx.AsyncClient, task: dict[str, Any], path: str, param: str, params: dict[str, int]
) -> None:
    """limit outside 1..1000 and a negative cursor are 422."""
    query = {param if k == "after" else k: v for k, v in params.items()}
    response = await client.get(f"/tasks/{task['uuid']}/{path}", params=query)
    assert_error(response, 422, "validation_error")


@pytest.mark.parametrize(
    ("path", "body"),
    [("tools", {"tool": "read_file"}), ("planning", {"plan_type": "x", "plan_content": "y"})],
)
async def test_journals_of_paused_and_unknown_tasks(
    client: httpx.AsyncClient, context_dir: Path, path: str, body: dict[str, Any]
) -> None:
    """A paused task takes no journal records (409) but still lists them; unknown task is 404."""
    task = await create_task(client)
    task_uuid = task["uuid"]
    first = await client.post(f"/tasks/{task_uuid}/{path}", json=body)
    assert first.status_code == 201
    assert (await client.post(f"/tasks/{task_uuid}/stop")).status_code == 200
    before = snapshot_dir(context_dir)
    assert_error(
        await client.post(f"/tasks/{task_uuid}/{path}", json=body), 409, "task_not_writable"
    )
    assert snapshot_dir(context_dir) == before
    listed = await client.get(f"/tasks/{task_uuid}/{path}")
    assert listed.status_code == 200
    assert listed.json()[path] == [first.json()]
    missing = "00000000-0000-4000-8000-000000000000"
    assert_error(await client.post(f"/tasks/{missing}/{path}", json=body), 404, "task_not_found")
    assert_error(await client.get(f"/tasks/{missing}/{path}"), 404, "task_not_found")


async def test_an_exactly_full_last_page_says_no_more(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    """Like /messages, a journal page points to a next page only when records follow."""
    uuid = task["uuid"]
    for n in range(4):
        await client.post(f"/tasks/{uuid}/tools", json={"tool": f"t{n}"})
        await client.post(f"/tasks/{uuid}/planning", json={"plan_type": "p", "plan_content": "x"})
    tools = (await client.get(f"/tasks/{uuid}/tools", params={"limit": 2})).json()
    assert tools["next_after_seq"] == 2
    last = await client.get(f"/tasks/{uuid}/tools", params={"after_seq": 2, "limit": 2})
    assert [r["seq"] for r in last.json()["tools"]] == [3, 4]
    assert last.json()["next_after_seq"] is None
    plans = await client.get(f"/tasks/{uuid}/planning", params={"after_id": 2, "limit": 2})
    assert [e["id"] for e in plans.json()["planning"]] == [3, 4]
    assert plans.json()["next_after_id"] is None


async def test_a_torn_journal_tail_is_cut_not_a_500(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path
) -> None:
    """A crash mid-write leaves half a line in tools.jsonl: reads cut it, numbering goes on."""
    uuid = task["uuid"]
    for n in range(3):
        await client.post(f"/tasks/{uuid}/tools", json={"tool": f"t{n}"})
    path = task_dir(context_dir, uuid) / "tools.jsonl"
    good = path.read_bytes()
    path.write_bytes(good + b'{"seq": 4, "tool": "l')
    for after in (0, 2, 3):
        page = await client.get(f"/tasks/{uuid}/tools", params={"after_seq": after})
        assert page.status_code == 200
    assert path.read_bytes() == good
    added = await client.post(f"/tasks/{uuid}/tools", json={"tool": "next"})
    assert added.json()["seq"] == 4
