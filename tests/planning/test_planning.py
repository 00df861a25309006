"""Planning history (planning.jsonl, seed 000 §11.5): entries numbered, paged, validated."""

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_error
from tests.support.files import read_jsonl, snapshot_dir, task_dir
from tests.support.tasks import post_plan
from tests.support.timestamps import parse_utc


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
        parse_utc(entry["created_at"])
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
