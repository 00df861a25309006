"""A create on a task key and user that another running task has is taken, and its answer
names those running siblings (a duplicate run of one issue, for the agent's queue to notice)."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.db.engine import Database, open_database
from app.task_key import TaskKey
from app.tasks.creation import MAX_RUNNING_SIBLINGS
from app.tasks.repository import running_siblings_query
from migrations.upgrade import upgrade_database
from tests.support.query_plans import plan, scans_table
from tests.support.tasks import DEFAULT_KEY, create_task, key

Client = httpx.AsyncClient


def siblings(created: dict[str, Any]) -> tuple[int, list[str]]:
    found = created["running_siblings"]
    assert set(found) == {"count", "uuids"}
    return found["count"], found["uuids"]


async def test_a_second_run_names_the_first(client: Client) -> None:
    first = await create_task(client)
    assert siblings(first) == (0, [])
    second = await create_task(client)
    assert second["status"] == "running"
    assert siblings(second) == (1, [first["uuid"]])
    third = await create_task(client)
    assert siblings(third) == (2, [second["uuid"], first["uuid"]])  # newest first


async def test_only_running_tasks_on_the_same_key_and_user_count(client: Client) -> None:
    running = await create_task(client)
    stopped = await create_task(client)
    assert (await client.post(f"/tasks/{stopped['uuid']}/stop")).status_code == 200
    completed = await create_task(client)
    assert (await client.post(f"/tasks/{completed['uuid']}/complete")).status_code == 200
    await create_task(client, user="someone-else")
    await create_task(client, task_key=key(task_id="28"))
    await create_task(client, task_key=key(repo="other"))
    anonymous = await create_task(client, user=None)
    created = await create_task(client)
    assert siblings(created) == (1, [running["uuid"]])
    # A task without a user is a sibling of tasks without one.
    assert siblings(await create_task(client, user=None)) == (1, [anonymous["uuid"]])


async def test_an_idempotent_repeat_names_the_others_not_itself(client: Client) -> None:
    first = await create_task(client)
    body = {"uuid": "550e8400-e29b-41d4-a716-446655440000"}
    created = await create_task(client, **body)
    response = await client.post(
        "/tasks",
        json={
            "uuid": body["uuid"],
            "task_key": dict(DEFAULT_KEY),
            "user": "notfolder",
            "llm_provider": "openai",
            "model": "gpt-4o",
            "context_length": 128000,
            "max_output_tokens": 4096,
        },
    )
    assert response.status_code == 200, response.text
    assert siblings(response.json()) == siblings(created) == (1, [first["uuid"]])


async def test_the_list_is_bounded_the_count_is_not(client: Client) -> None:
    uuids = [(await create_task(client))["uuid"] for _ in range(MAX_RUNNING_SIBLINGS + 2)]
    count, listed = siblings(await create_task(client))
    assert count == MAX_RUNNING_SIBLINGS + 2
    assert listed == uuids[::-1][:MAX_RUNNING_SIBLINGS]


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = open_database(f"sqlite+aiosqlite:///{tmp_path / 'plans.db'}")
    await upgrade_database(database)
    yield database
    await database.dispose()


@pytest.mark.sqlite_only
async def test_the_query_searches_the_task_key_index(db: Database) -> None:
    query = running_siblings_query(TaskKey(**DEFAULT_KEY), "notfolder", "u", 20)
    steps = await plan(db, query)
    assert not scans_table(steps), steps
    assert any(s.startswith("SEARCH tasks USING INDEX") and "task_source" in s for s in steps), (
        steps
    )
