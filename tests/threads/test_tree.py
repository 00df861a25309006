"""Starting threads: seed 003's windows and depth limit, the tree, and refusals (SPEC §8), thread
ids far out of range among them."""

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from tests.support.app import running_app
from tests.support.errors import assert_error
from tests.support.files import snapshot_dir
from tests.support.tasks import create_task
from tests.support.threads import send, start

MESSAGE = {"role": "user", "content": "run the tests again"}


def windows(node: dict[str, Any]) -> dict[int, tuple[int | None, int]]:
    """thread_id -> (parent, window), over the whole tree."""
    found = {node["thread_id"]: (node["parent_thread_id"], node["window"])}
    for child in node["children"]:
        found |= windows(child)
    return found


async def test_the_original_design_s_example_tree(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """root 100k -> child 80k -> grandchild 64k, and a sibling 80k. The root is at depth 0: under
    max_depth 3 a thread may be at depth 3, and none starts under it."""
    task = await create_task(client, context_length=100_000)
    uuid = task["uuid"]
    child = await start(client, uuid, label="autonomous run")
    grandchild = await start(client, uuid, parent_thread_id=child["thread_id"], label="coder")
    sibling = await start(client, uuid, label="another task", window_ratio=0.8)
    assert (child["window"], grandchild["window"], sibling["window"]) == (80_000, 64_000, 80_000)
    assert (child["depth"], grandchild["depth"], sibling["depth"]) == (1, 2, 1)
    assert child["status"] == "active"
    assert child["label"] == "autonomous run"
    deepest = await start(client, uuid, parent_thread_id=grandchild["thread_id"])
    assert (deepest["depth"], deepest["window"]) == (3, 51_200)

    before = snapshot_dir(context_dir)
    tree_before = (await client.get(f"/tasks/{uuid}/threads")).json()
    response = await client.post(
        f"/tasks/{uuid}/threads", json={"parent_thread_id": deepest["thread_id"]}
    )
    details = assert_error(response, 409, "thread_depth_exceeded")
    assert details == {"depth": 4, "max_depth": 3}
    assert snapshot_dir(context_dir) == before
    tree = (await client.get(f"/tasks/{uuid}/threads")).json()
    assert tree == tree_before
    assert tree["thread_id"] == 0
    assert windows(tree) == {
        0: (None, 100_000),
        child["thread_id"]: (0, 80_000),
        grandchild["thread_id"]: (child["thread_id"], 64_000),
        deepest["thread_id"]: (grandchild["thread_id"], 51_200),
        sibling["thread_id"]: (0, 80_000),
    }
    assert [c["thread_id"] for c in tree["children"]] == [child["thread_id"], sibling["thread_id"]]


async def test_ratios_multiply_down_the_chain(client: httpx.AsyncClient) -> None:
    task = await create_task(client, context_length=128_000)
    uuid = task["uuid"]
    half = await start(client, uuid, window_ratio=0.5)
    under = await start(client, uuid, parent_thread_id=half["thread_id"], window_ratio=0.3)
    assert (half["window"], under["window"]) == (64_000, 19_200)


async def test_a_thread_with_a_window_under_a_contexts_least_is_refused(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """Its payload could not hold even the parts every payload keeps: refused when asked for,
    not a 413 at every request after."""
    uuid = (await create_task(client, context_length=4096, max_output_tokens=256))["uuid"]
    half = await start(client, uuid, window_ratio=0.5)
    before = snapshot_dir(context_dir)
    tree_before = (await client.get(f"/tasks/{uuid}/threads")).json()
    for parent, ratio in ((0, 0.2), (half["thread_id"], 0.4)):
        body = {"parent_thread_id": parent, "window_ratio": ratio}
        response = await client.post(f"/tasks/{uuid}/threads", json=body)
        details = assert_error(response, 422, "thread_window_too_small")
        assert details == {"window": int(4096 * (0.5 if parent else 1) * ratio), "min_window": 1024}
    assert snapshot_dir(context_dir) == before
    assert (await client.get(f"/tasks/{uuid}/threads")).json() == tree_before
    smallest = await start(client, uuid, parent_thread_id=half["thread_id"], window_ratio=0.5)
    assert smallest["window"] == 1024


@pytest.mark.parametrize(("global_cap", "asked"), [(2, 3), (3, 2)])
async def test_the_smaller_of_the_global_and_the_asked_depth_limit_holds(
    context_dir: Path, global_cap: int, asked: int
) -> None:
    settings = Settings(context_dir=context_dir, threads={"max_depth": global_cap})
    async with running_app(settings) as client:
        uuid = (await create_task(client))["uuid"]
        child = await start(client, uuid, max_depth=asked)
        grandchild = await start(client, uuid, parent_thread_id=child["thread_id"], max_depth=asked)
        assert grandchild["depth"] == 2  # allowed: the limit is 2
        body = {"parent_thread_id": grandchild["thread_id"], "max_depth": asked}
        response = await client.post(f"/tasks/{uuid}/threads", json=body)
        details = assert_error(response, 409, "thread_depth_exceeded")
        assert details == {"depth": 3, "max_depth": 2}


@pytest.mark.parametrize(
    "body",
    [
        {"window_ratio": 1.0},
        {"window_ratio": 0},
        {"parent_thread_id": -1},
        {"max_depth": 0},
        {"label": "x" * 256},
        {"thread_id": 5},
    ],
)
async def test_bad_bodies_are_refused(
    client: httpx.AsyncClient, context_dir: Path, body: dict[str, Any]
) -> None:
    uuid = (await create_task(client))["uuid"]
    before = snapshot_dir(context_dir)
    response = await client.post(f"/tasks/{uuid}/threads", json=body)
    assert_error(response, 422, "validation_error")
    assert snapshot_dir(context_dir) == before
    assert (await client.get(f"/tasks/{uuid}/threads")).json()["children"] == []


async def test_unknown_parents_tasks_and_finished_tasks(client: httpx.AsyncClient) -> None:
    uuid = (await create_task(client))["uuid"]
    response = await client.post(f"/tasks/{uuid}/threads", json={"parent_thread_id": 7})
    assert assert_error(response, 404, "thread_not_found") == {"uuid": uuid, "thread_id": 7}
    missing = "6f1c1d0e-0000-4000-8000-000000000000"
    assert_error(await client.post(f"/tasks/{missing}/threads", json={}), 404, "task_not_found")
    assert_error(await client.get(f"/tasks/{missing}/threads"), 404, "task_not_found")
    await client.post(f"/tasks/{uuid}/stop")
    assert_error(await client.post(f"/tasks/{uuid}/threads", json={}), 409, "task_not_writable")


async def test_completing_the_task_aborts_its_active_threads(client: httpx.AsyncClient) -> None:
    uuid = (await create_task(client))["uuid"]
    child = await start(client, uuid)
    await start(client, uuid, parent_thread_id=child["thread_id"])
    assert (await client.post(f"/tasks/{uuid}/complete")).status_code == 200
    tree = (await client.get(f"/tasks/{uuid}/threads")).json()
    assert tree["status"] == "completed"
    nested = tree["children"][0]
    assert [nested["status"], nested["children"][0]["status"]] == ["aborted", "aborted"]
    assert nested["completed_at"] is not None


async def test_concurrent_starts_get_distinct_consecutive_ids(client: httpx.AsyncClient) -> None:
    """Thread ids are handed out under the task lock: no duplicate, no gap (SPEC §3.5)."""
    uuid = (await create_task(client))["uuid"]
    started = await asyncio.gather(*(start(client, uuid, label=f"t{i}") for i in range(20)))
    assert sorted(t["thread_id"] for t in started) == list(range(1, 21))
    tree = (await client.get(f"/tasks/{uuid}/threads")).json()
    assert [c["thread_id"] for c in tree["children"]] == list(range(1, 21))


async def test_one_thread_with_the_threads_under_it(client: httpx.AsyncClient) -> None:
    uuid = (await create_task(client))["uuid"]
    child = await start(client, uuid, label="child")
    grandchild = await start(client, uuid, parent_thread_id=child["thread_id"])
    await start(client, uuid, label="sibling")
    response = await client.get(f"/tasks/{uuid}/threads/{child['thread_id']}")
    assert response.status_code == 200, response.text
    found = response.json()
    assert (found["thread_id"], found["label"]) == (child["thread_id"], "child")
    assert [c["thread_id"] for c in found["children"]] == [grandchild["thread_id"]]
    details = assert_error(await client.get(f"/tasks/{uuid}/threads/99"), 404, "thread_not_found")
    assert details == {"uuid": uuid, "thread_id": 99}
    missing = "6f1c1d0e-0000-4000-8000-000000000000"
    assert_error(await client.get(f"/tasks/{missing}/threads/1"), 404, "task_not_found")
    assert (await client.get(f"/tasks/{uuid}/threads/0")).status_code == 422


async def test_thread_ids_far_out_of_range_are_422_and_depth_refusals_say_why(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    uuid = (await create_task(client))["uuid"]
    child = (await start(client, uuid))["thread_id"]
    grand = (await start(client, uuid, parent_thread_id=child))["thread_id"]
    deepest = (await start(client, uuid, parent_thread_id=grand))["thread_id"]
    before, tree = snapshot_dir(context_dir), (await client.get(f"/tasks/{uuid}/threads")).json()
    huge = 2**70
    response = await client.post(f"/tasks/{uuid}/threads", json={"parent_thread_id": huge})
    assert_error(response, 422, "validation_error")
    for action in ("end", "abort"):
        response = await client.post(f"/tasks/{uuid}/threads/{huge}/{action}", json={})
        assert_error(response, 422, "validation_error")
    response = await send(client, uuid, MESSAGE, huge)
    assert_error(response, 422, "validation_error")
    response = await client.get(f"/tasks/{uuid}/request", params={"thread_id": huge})
    assert_error(response, 422, "validation_error")

    response = await client.post(f"/tasks/{uuid}/threads", json={"parent_thread_id": deepest})
    assert assert_error(response, 409, "thread_depth_exceeded") == {"depth": 4, "max_depth": 3}
    assert snapshot_dir(context_dir) == before
    assert (await client.get(f"/tasks/{uuid}/threads")).json() == tree
