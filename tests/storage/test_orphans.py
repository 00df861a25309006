"""Directories the database does not know of (orphans), and rows whose directory is gone.

The situation of a database restored from an older backup: task directories written after
the backup have no row. The service never destroys them: a create of the same uuid sets the
old directory aside, intact, under .orphans/ and creates the task; startup reconciliation and
GET /maintenance report every orphan.
"""

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.storage.layout import ORPHANS
from tests.api.helpers import locations
from tests.conftest import running_app, snapshot_dir, task_body
from tests.database import run_sql
from tests.storage.support import get_json, post_json


async def _task_with_history(client: httpx.AsyncClient, action: str | None = None) -> str:
    created = await post_json(client, "/tasks", task_body(system_prompt="You are an agent."))
    uuid: str = created["uuid"]
    for n in range(6):
        message = {"role": "user", "content": f"an old message worth keeping, number {n}"}
        await post_json(client, f"/tasks/{uuid}/messages", message)
    if action is not None:
        body = {"error_message": "boom"} if action == "fail" else None
        response = await client.post(f"/tasks/{uuid}/{action}", json=body)
        assert response.status_code == 200, response.text
    return uuid


def _forget_row(context_dir: Path, uuid: str) -> None:
    """What restoring the database from a backup older than the task does: its rows go."""
    run_sql(
        context_dir,
        *(
            (f"DELETE FROM {table} WHERE task_uuid = :uuid", {"uuid": uuid})
            for table in ("jobs", "idempotency_keys", "threads", "context_heads")
        ),
        ("DELETE FROM tasks WHERE uuid = :uuid", {"uuid": uuid}),
    )


def _set_aside(context_dir: Path, uuid: str) -> list[Path]:
    return sorted((context_dir / ORPHANS).glob(f"{uuid}.*"))


def _new_body(uuid: str) -> dict[str, Any]:
    return task_body(uuid=uuid, system_prompt="A new task with an old uuid.")


@pytest.mark.parametrize(("action", "location"), [(None, "running"), ("complete", "completed")])
async def test_create_over_a_directory_without_row_sets_it_aside_intact(
    settings: Settings,
    context_dir: Path,
    caplog: pytest.LogCaptureFixture,
    action: str | None,
    location: str,
) -> None:
    """running/{U}/ (or completed/{U}/) exists with real data and no row; POST /tasks with U
    creates the task (201, its own fresh files) after moving the old directory, byte for byte,
    to .orphans/{U}.{location}.{time}; nothing stays in .staging/, the old files survive every
    later read and restart, and a re-POST is the idempotent 200 of the new task."""
    async with running_app(settings) as client:
        uuid = await _task_with_history(client, action)
    old = snapshot_dir(context_dir / location / uuid)
    assert len(old["messages.jsonl"]) > 500
    _forget_row(context_dir, uuid)

    with caplog.at_level(logging.WARNING):
        async with running_app(settings) as client:
            response = await client.post("/tasks", json=_new_body(uuid))
            assert response.status_code == 201, response.text
            assert locations(context_dir, uuid) == ["running"]
            payload = await get_json(client, f"/tasks/{uuid}/request")
            assert [m["content"] for m in payload["messages"]] == ["A new task with an old uuid."]
            again = await client.post("/tasks", json=_new_body(uuid))
            assert again.status_code == 200, again.text
    [aside] = _set_aside(context_dir, uuid)
    assert aside.name.startswith(f"{uuid}.{location}.")
    assert snapshot_dir(aside) == old
    assert not (context_dir / ".staging" / uuid).exists()
    assert any(
        uuid in r.getMessage() and ORPHANS in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
    )

    async with running_app(settings) as client:  # a restart keeps both
        await get_json(client, f"/tasks/{uuid}/request")
    assert snapshot_dir(aside) == old
    assert locations(context_dir, uuid) == ["running"]
