"""The cleanup tests' helpers: tasks made old, and what "gone" and "present" mean."""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import update

from app.config import Settings
from app.db.engine import open_database
from app.db.models import Task
from tests.support.database import run_sql
from tests.support.errors import assert_error
from tests.support.files import locations, paths_naming
from tests.support.settings import layered
from tests.support.tasks import create_task

DIR_OF = {"running": "running", "paused": "paused", "completed": "completed", "failed": "completed"}
# Tables whose rows belong to a task (removed with it, by the foreign keys' cascade).
TASK_TABLES = ("context_heads", "jobs", "idempotency_keys")


def cleanup_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """Settings on ``tmp_path / "contexts"`` (SQLite there); by default the periodic cleanup is
    off, so that only what the test runs removes tasks."""
    values = {"context_dir": tmp_path / "contexts", "cleanup": {"days": 0}}
    return Settings(**layered(values, overrides))


async def make_task(client: httpx.AsyncClient, status: str, content: str = "Go") -> str:
    """A task with a system prompt, one keyed message and a planning entry (and no inherited
    context: the tasks share one task key), brought to ``status``; returns its uuid."""
    created = await create_task(client, system_prompt="You are a coding agent.", inherit=False)
    task_uuid: str = created["uuid"]
    appended = await client.post(
        f"/tasks/{task_uuid}/messages",
        json={"role": "user", "content": content},
        headers={"Idempotency-Key": f"first-{task_uuid}"},
    )
    assert appended.status_code == 201, appended.text
    planned = await client.post(
        f"/tasks/{task_uuid}/planning", json={"plan_type": "initial", "plan_content": "1. Fix"}
    )
    assert planned.status_code == 201, planned.text
    actions = {"running": [], "paused": ["stop"], "completed": ["complete"], "failed": ["fail"]}
    for action in actions[status]:
        body = {"error_message": "tests failed"} if action == "fail" else None
        response = await client.post(f"/tasks/{task_uuid}/{action}", json=body)
        assert response.status_code == 200, response.text
    return task_uuid


async def backdate(settings: Settings, uuids: list[str], *, days: float) -> datetime:
    """Make tasks look ``days`` old: finished ones completed then, others created then.

    The API rightly has no way to back-date a completion and a test cannot wait 30 days, so
    the row is updated through the app's own database layer: the same engine, model and UTC
    column type the service writes with, so the stored value is exactly what a real completion
    that long ago would have left. Returns the instant written."""
    when = datetime.now(UTC) - timedelta(days=days)
    db = open_database(settings.effective_database_url)
    try:
        async with db.transaction() as session:
            tasks = update(Task).where(Task.uuid.in_(uuids))
            began = when - timedelta(hours=1)
            rows = await session.execute(
                tasks.values(created_at=began, started_at=began, updated_at=when)
            )
            assert rows.rowcount == len(uuids)  # type: ignore[attr-defined]
            finished = tasks.where(Task.completed_at.is_not(None))
            await session.execute(finished.values(completed_at=when))
    finally:
        await db.dispose()
    return when


def task_rows(context_dir: Path, task_uuid: str) -> dict[str, int]:
    """How many rows each table holds for the task."""
    columns = {"tasks": "uuid"} | dict.fromkeys(TASK_TABLES, "task_uuid")
    queries = [f"SELECT count(*) FROM {table} WHERE {c} = :uuid" for table, c in columns.items()]
    counts = run_sql(context_dir, *((query, {"uuid": task_uuid}) for query in queries))
    return {table: rows[0][0] for table, rows in zip(columns, counts, strict=True)}


async def assert_gone(client: httpx.AsyncClient, context_dir: Path, task_uuid: str) -> None:
    """No row in any table, no directory anywhere (.trash included), no lock file, 404 from
    the API."""
    assert_error(await client.get(f"/tasks/{task_uuid}"), 404, "task_not_found")
    assert_error(await client.get(f"/tasks/{task_uuid}/messages"), 404, "task_not_found")
    assert locations(context_dir, task_uuid) == []
    assert paths_naming(context_dir, task_uuid) == []
    assert set(task_rows(context_dir, task_uuid).values()) == {0}


async def assert_present(
    client: httpx.AsyncClient, context_dir: Path, task_uuid: str, status: str
) -> dict[str, Any]:
    """Row and directory where the status says, readable through the API; returns the task."""
    response = await client.get(f"/tasks/{task_uuid}")
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()
    assert task["status"] == status
    assert locations(context_dir, task_uuid) == [DIR_OF[status]]
    history = await client.get(f"/tasks/{task_uuid}/messages")
    assert history.status_code == 200, history.text
    contents = [m["content"] for m in history.json()["messages"]]
    assert contents[0] == "You are a coding agent."
    assert len(contents) == 2
    return task
