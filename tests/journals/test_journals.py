"""What the two journals share (tools.jsonl and planning.jsonl, app/journals): paging bounds,
refusals on paused and unknown tasks, the last page, a torn tail."""

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_error
from tests.support.files import snapshot_dir, task_dir
from tests.support.tasks import create_task


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
