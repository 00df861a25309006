"""Startup reconciliation: after a crash, task directories are put where their rows say.

A restart is a new app (create_app) on the same settings and CONTEXT_DIR; a crash is a
directory left by hand where a create, delete or move that was cut short would have left it.
"""

import asyncio
import logging
import shutil
import uuid as uuid_module
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.storage.layout import LOCATIONS
from tests.support.app import running_app
from tests.support.database import run_sql
from tests.support.files import snapshot_dir
from tests.support.records import get_json, post_json
from tests.support.tasks import task_body


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """Start a fresh app (migrations + reconciliation) and yield a client for it."""
    async with running_app(settings) as client:
        yield client


async def _create(client: httpx.AsyncClient, **overrides: Any) -> str:
    body = task_body(system_prompt="You are an agent.", **overrides)
    created = await post_json(client, "/tasks", body)
    uuid: str = created["uuid"]
    await post_json(client, f"/tasks/{uuid}/messages", {"role": "user", "content": "hello"})
    return uuid


def _where(root: Path, uuid: str) -> list[str]:
    return [loc for loc in LOCATIONS if (root / loc / uuid).is_dir()]


def _move(root: Path, uuid: str, source: str, target: str) -> None:
    (root / source / uuid).rename(root / target / uuid)


def _reconcile_logs(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "app.context.reconcile" and r.levelno == level
    ]


async def _readable(client: httpx.AsyncClient, uuid: str) -> dict[str, Any]:
    """The task answers and serves its payload; returns the task."""
    payload = await get_json(client, f"/tasks/{uuid}/request")
    assert payload["messages"][-1] == {"role": "user", "content": "hello"}
    task: dict[str, Any] = await get_json(client, f"/tasks/{uuid}")
    return task


# -- create interrupted ------------------------------------------------------------------


async def test_staging_dir_with_row_is_moved_to_running(
    settings: Settings, context_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash after the create's DB commit but before the move out of .staging/: the next
    start finishes the create (the directory lands in running/ with its files intact)."""
    async with serving(settings) as client:
        uuid = await _create(client)
    files = snapshot_dir(context_dir / "running" / uuid)
    _move(context_dir, uuid, "running", ".staging")

    with caplog.at_level(logging.WARNING):
        async with serving(settings) as client:
            assert _where(context_dir, uuid) == ["running"]
            assert snapshot_dir(context_dir / "running" / uuid) == files
            assert (await _readable(client, uuid))["status"] == "running"
    assert any("from .staging to running" in m for m in _reconcile_logs(caplog, logging.WARNING))


async def test_staging_dir_without_row_is_removed(
    settings: Settings, context_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash before the create's DB commit leaves .staging/{uuid} without a row: it is
    removed at the next start, and the same uuid can then be created normally."""
    orphan = str(uuid_module.uuid4())
    async with serving(settings):
        pass
    staged = context_dir / ".staging" / orphan
    staged.mkdir()
    (staged / "messages.jsonl").write_bytes(b'{"seq":1}\n')

    with caplog.at_level(logging.WARNING):
        async with serving(settings) as client:
            assert _where(context_dir, orphan) == []
            created = await post_json(client, "/tasks", task_body(uuid=orphan))
            assert created["uuid"] == orphan
            assert _where(context_dir, orphan) == ["running"]
    assert any("leftover of a staging" in m for m in _reconcile_logs(caplog, logging.WARNING))


# -- delete interrupted ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "location"),
    [(None, "running"), ("stop", "paused"), ("fail", "completed")],
)
async def test_trash_dir_with_row_is_restored(
    settings: Settings, context_dir: Path, action: str | None, location: str
) -> None:
    """A crash during a delete, after the move to .trash/ but before the row was deleted: the
    task still exists, so its directory goes back where its status says."""
    async with serving(settings) as client:
        uuid = await _create(client)
        if action is not None:
            body = {"error_message": "boom"} if action == "fail" else None
            response = await client.post(f"/tasks/{uuid}/{action}", json=body)
            assert response.status_code == 200, response.text
    files = snapshot_dir(context_dir / location / uuid)
    _move(context_dir, uuid, location, ".trash")

    async with serving(settings) as client:
        assert _where(context_dir, uuid) == [location]
        assert snapshot_dir(context_dir / location / uuid) == files
        await _readable(client, uuid)
        deleted = await client.delete(f"/tasks/{uuid}")  # and the delete can be retried
        assert deleted.status_code == 204
        assert _where(context_dir, uuid) == []


async def test_trash_dir_without_row_is_removed(
    settings: Settings, context_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash during a delete after the row was deleted but before the directory was removed:
    the .trash/ leftover is removed at the next start; other tasks are untouched."""
    async with serving(settings) as client:
        kept = await _create(client)
        gone = await _create(client)
    _move(context_dir, gone, "running", ".trash")
    run_sql(  # the row delete did commit
        context_dir,
        ("DELETE FROM context_heads WHERE task_uuid = :uuid", {"uuid": gone}),
        ("DELETE FROM tasks WHERE uuid = :uuid", {"uuid": gone}),
    )
    kept_files = snapshot_dir(context_dir / "running" / kept)

    with caplog.at_level(logging.WARNING):
        async with serving(settings) as client:
            assert _where(context_dir, gone) == []
            assert (await client.get(f"/tasks/{gone}")).status_code == 404
            assert snapshot_dir(context_dir / "running" / kept) == kept_files
            await _readable(client, kept)
    assert any("leftover of a trash" in m for m in _reconcile_logs(caplog, logging.WARNING))


# -- status moves interrupted ------------------------------------------------------------


@pytest.mark.parametrize(
    ("actions", "location"),
    [(["stop"], "paused"), (["complete"], "completed"), (["stop", "resume"], "running")],
)
async def test_dir_is_moved_where_status_says(
    settings: Settings, context_dir: Path, actions: list[str], location: str
) -> None:
    """A move whose rename happened but whose status commit did not (or the reverse) leaves a
    directory in the wrong status dir; the row wins at the next start."""
    async with serving(settings) as client:
        uuid = await _create(client)
        for action in actions:
            assert (await client.post(f"/tasks/{uuid}/{action}")).status_code == 200
    wrong = "paused" if location == "running" else "running"
    _move(context_dir, uuid, location, wrong)

    async with serving(settings) as client:
        assert _where(context_dir, uuid) == [location]
        task = await _readable(client, uuid)
        assert task["status"] == {"paused": "paused", "completed": "completed"}.get(
            location, "running"
        )


async def test_stale_copy_next_to_the_right_dir_is_removed(
    settings: Settings, context_dir: Path
) -> None:
    """A task with its directory in the right place and a stale copy in .staging/: the copy
    is removed, the real directory is kept as is."""
    async with serving(settings) as client:
        uuid = await _create(client)
    files = snapshot_dir(context_dir / "running" / uuid)
    shutil.copytree(context_dir / "running" / uuid, context_dir / ".staging" / uuid)
    (context_dir / ".staging" / uuid / "messages.jsonl").write_bytes(b"stale\n")

    async with serving(settings) as client:
        assert _where(context_dir, uuid) == ["running"]
        assert snapshot_dir(context_dir / "running" / uuid) == files
        await _readable(client, uuid)


async def test_dir_without_row_in_status_dir_is_left_alone(
    settings: Settings, context_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A running/{uuid} directory without a row is not ours to delete: it is kept untouched
    (and logged as an error) at every start; non-uuid entries are ignored."""
    stranger = str(uuid_module.uuid4())
    async with serving(settings):
        pass
    directory = context_dir / "running" / stranger
    directory.mkdir()
    (directory / "messages.jsonl").write_bytes(b'{"seq":1,"role":"user"}\n')
    (context_dir / "running" / "not-a-uuid").mkdir()
    before = snapshot_dir(context_dir)

    for _ in range(2):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            async with serving(settings) as client:
                assert (await client.get(f"/tasks/{stranger}")).status_code == 404
                listed = await get_json(client, "/tasks")
                assert listed["tasks"] == []
        assert any(
            stranger in m and "no task row" in m for m in _reconcile_logs(caplog, logging.ERROR)
        )
        assert snapshot_dir(context_dir) == before
        assert (context_dir / "running" / "not-a-uuid").is_dir()


async def test_row_without_any_dir_is_logged_and_reported(
    settings: Settings, context_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A row whose directory vanished is logged at start; requests get a clear 500 error
    (task_files_missing) instead of a crash or a silently empty context."""
    async with serving(settings) as client:
        uuid = await _create(client)
    shutil.rmtree(context_dir / "running" / uuid)
    with caplog.at_level(logging.WARNING):
        async with serving(settings) as client:
            response = await client.get(f"/tasks/{uuid}/request")
    assert any(uuid in m and "missing" in m for m in _reconcile_logs(caplog, logging.ERROR))
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "task_files_missing"


# -- self-healing at request time --------------------------------------------------------


@pytest.mark.parametrize("wrong", ["paused", "completed", ".trash", ".staging"])
async def test_misplaced_dir_is_healed_at_request_time(
    settings: Settings, context_dir: Path, caplog: pytest.LogCaptureFixture, wrong: str
) -> None:
    """With the app running (no restart), a directory moved by hand is found and moved back
    where its status says by the next request, which then succeeds."""
    async with serving(settings) as client:
        uuid = await _create(client)
        files = snapshot_dir(context_dir / "running" / uuid)
        _move(context_dir, uuid, "running", wrong)
        with caplog.at_level(logging.WARNING):
            payload = await get_json(client, f"/tasks/{uuid}/request")
        assert payload["messages"][-1] == {"role": "user", "content": "hello"}
        assert _where(context_dir, uuid) == ["running"]
        assert snapshot_dir(context_dir / "running" / uuid) == files
        assert any(
            f"from {wrong} to running" in r.getMessage()
            for r in caplog.records
            if r.name == "app.context.store"
        )
        appended = await post_json(
            client, f"/tasks/{uuid}/messages", {"role": "user", "content": "x"}
        )
        assert appended["seqs"] == [3]


# -- concurrent starts -------------------------------------------------------------------


async def test_two_apps_start_concurrently(settings: Settings, context_dir: Path) -> None:
    """Two app instances on one fresh CONTEXT_DIR start at the same time: the startup lock
    serialises migration and reconciliation, both serve, and each sees the other's tasks."""
    barrier = asyncio.Barrier(2)
    created: list[str] = []

    async def run(index: int) -> None:
        async with serving(settings) as client:
            await barrier.wait()  # both apps are up at the same time
            assert (await client.get("/readyz")).status_code == 200
            created.append(await _create(client, metadata={"app": index}))
            await barrier.wait()
            listed = await get_json(client, "/tasks")
            assert sorted(t["uuid"] for t in listed["tasks"]) == sorted(created)
            await barrier.wait()

    await asyncio.wait_for(asyncio.gather(run(0), run(1)), timeout=120)
    [versions] = run_sql(context_dir, ("SELECT version_num FROM alembic_version", {}))
    assert len(versions) == 1
    assert sorted(p.name for p in (context_dir / "running").iterdir()) == sorted(created)
