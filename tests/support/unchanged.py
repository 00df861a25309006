"""What a refused request must leave alone (SPEC §3.8), checked three ways: the bytes of every
file under CONTEXT_DIR, every directory under it, and the tasks as the API reports them (the
whole GET /tasks/{uuid} body: status, statistics, context head, timestamps).

The bad-input tests run with small size limits so that their 413 cases stay cheap.
"""

from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from tests.support.files import directories, snapshot_dir
from tests.support.waits import settled_jobs

KiB = 1024
MAX_BODY = 64 * KiB
MAX_MESSAGE = 16 * KiB
MAX_BATCH = 10
LOCATIONS = ("running", "paused", "completed", ".staging", ".trash")


def small_limits(context_dir: Path) -> Settings:
    """The default settings with small size limits: MAX_BODY_BYTES 64 KiB, MAX_MESSAGE_BYTES
    16 KiB, MAX_BATCH_MESSAGES 10."""
    return Settings(
        context_dir=context_dir,
        limits={
            "max_body_bytes": MAX_BODY,
            "max_message_bytes": MAX_MESSAGE,
            "max_batch_messages": MAX_BATCH,
        },
    )


async def task_uuids(client: httpx.AsyncClient) -> list[str]:
    response = await client.get("/tasks", params={"limit": 1000})
    assert response.status_code == 200
    return [t["uuid"] for t in response.json()["tasks"]]


async def state(
    client: httpx.AsyncClient, context_dir: Path, uuid: str | None = None
) -> dict[str, Any]:
    """Everything a bad request must leave alone (once the task's background work is done)."""
    if uuid is not None:
        await settled_jobs(client, uuid, at_least_one=False)  # a final summary...
    snapshot: dict[str, Any] = {
        "files": snapshot_dir(context_dir),
        "dirs": directories(context_dir),
        "tasks": await task_uuids(client),
    }
    if uuid is not None:
        response = await client.get(f"/tasks/{uuid}")
        assert response.status_code == 200
        snapshot["task"] = response.json()
    return snapshot


def assert_unchanged(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Two ``state`` snapshots agree: same directories, file bytes, task list and task."""
    assert after["dirs"] == before["dirs"]
    assert after["files"].keys() == before["files"].keys()
    for name, data in before["files"].items():
        assert after["files"][name] == data, f"{name} changed"
    assert after["tasks"] == before["tasks"]
    if "task" in before:
        assert after["task"]["context"] == before["task"]["context"]
        assert after["task"]["statistics"] == before["task"]["statistics"]
        assert after["task"] == before["task"]
