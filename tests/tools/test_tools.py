"""Tool execution records (tools.jsonl, seed 001 §3.6): numbered, paged, validated."""

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_error
from tests.support.files import read_jsonl, snapshot_dir, task_dir
from tests.support.timestamps import parse_utc


async def post_tool(client: httpx.AsyncClient, task_uuid: str, body: dict[str, Any]) -> Any:
    """POST /tools; asserts 201 and returns the record."""
    response = await client.post(f"/tasks/{task_uuid}/tools", json=body)
    assert response.status_code == 201, response.text
    return response.json()


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
    parse_utc(success["timestamp"])

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
