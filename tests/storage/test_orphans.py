"""Directories the database does not know of (orphans), and rows whose directory is gone.

The situation of a database restored from an older backup: task directories written after
the backup have no row. The service never destroys them: a create of the same uuid sets the
old directory aside, intact, under .orphans/ and creates the task; startup reconciliation and
GET /maintenance report every orphan.
"""

import errno
import logging
import os
import shutil
import uuid as uuid_module
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.lifespan import open_services
from app.maintenance.service import MaintenanceService
from app.storage.layout import ORPHANS
from tests.support.app import running_app
from tests.support.database import run_sql
from tests.support.errors import assert_error
from tests.support.files import locations, paths_naming, snapshot_dir
from tests.support.records import get_json, post_json
from tests.support.tasks import task_body


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


async def test_reconciliation_and_maintenance_report_the_orphans(
    settings: Settings, context_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a restore: a directory without a row (left in place), one set aside by a create,
    and a row whose directory is gone. Startup logs each kind with its uuids; GET /maintenance
    counts and lists them (capped, sorted), and a healthy task appears in none."""
    async with running_app(settings) as client:
        healthy = await _task_with_history(client)
        strangers = sorted([await _task_with_history(client, "stop") for _ in range(3)])
        displaced = await _task_with_history(client)
        lost = await _task_with_history(client)
    for uuid in (*strangers, displaced):
        _forget_row(context_dir, uuid)
    shutil.rmtree(context_dir / "running" / lost)
    before = snapshot_dir(context_dir)

    with caplog.at_level(logging.ERROR):
        async with running_app(settings) as client:
            assert snapshot_dir(context_dir) == before  # reconciliation moved nothing
            await post_json(client, "/tasks", _new_body(displaced))
            report = await get_json(client, "/maintenance")
    started = [r.getMessage() for r in caplog.records if r.name == "app.context.reconcile"]
    assert any(all(u in m for u in strangers) and "no task row" in m for m in started)
    assert any(lost in m and "missing" in m for m in started)
    [aside] = _set_aside(context_dir, displaced)
    assert report == {
        "orphans": {
            "directories_without_rows": {
                "count": 3,
                "items": [f"paused/{uuid}" for uuid in strangers],
            },
            "set_aside": {"count": 1, "items": [aside.name]},
            "rows_without_directories": {"count": 1, "items": [lost]},
        }
    }
    assert healthy not in str(report)

    caplog.clear()
    with caplog.at_level(logging.ERROR):
        async with open_services(settings) as services:  # a second start reports the set aside
            capped = MaintenanceService(services.db, services.tasks, settings, max_listed=2)
            orphans = (await capped.overview()).orphans
    assert orphans.directories_without_rows.count == 3
    assert orphans.directories_without_rows.items == [f"paused/{u}" for u in strangers[:2]]
    assert any(aside.name in r.getMessage() for r in caplog.records)


async def test_a_create_whose_directory_cannot_be_moved_in_place_leaves_nothing(
    settings: Settings, context_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file system turns read-only just as the new directory is moved from .staging/ into
    running/ (after the row committed): 503, and neither row, directory nor lock file stays;
    the same create succeeds once the disk is back."""
    uuid = str(uuid_module.uuid4())
    into_place = context_dir / "running" / uuid
    replace = os.replace

    def read_only_there(source: str | Path, target: str | Path) -> None:
        if Path(target) == into_place:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(target))
        replace(source, target)

    async with running_app(settings) as client:
        before = snapshot_dir(context_dir)
        with monkeypatch.context() as patched:
            patched.setattr(os, "replace", read_only_there)
            response = await client.post("/tasks", json=_new_body(uuid))
        assert_error(response, 503, "storage_unavailable")
        assert run_sql(context_dir, ("SELECT uuid FROM tasks", {})) == [[]]
        assert paths_naming(context_dir, uuid) == []
        assert snapshot_dir(context_dir) == before
        assert_error(await client.get(f"/tasks/{uuid}"), 404, "task_not_found")
        await post_json(client, "/tasks", _new_body(uuid))
        assert locations(context_dir, uuid) == ["running"]


async def test_a_second_copy_in_another_status_directory_is_set_aside_not_removed(
    settings: Settings, context_dir: Path
) -> None:
    """A task in running/ and a copy of it (another's files, say) in completed/: the start
    keeps the task's directory and moves the copy, intact, to .orphans/."""
    async with running_app(settings) as client:
        uuid = await _task_with_history(client)
    files = snapshot_dir(context_dir / "running" / uuid)
    shutil.copytree(context_dir / "running" / uuid, context_dir / "completed" / uuid)
    (context_dir / "completed" / uuid / "notes.txt").write_text("not the service's")
    copy = snapshot_dir(context_dir / "completed" / uuid)

    async with running_app(settings) as client:
        assert locations(context_dir, uuid) == ["running"]
        assert snapshot_dir(context_dir / "running" / uuid) == files
        await get_json(client, f"/tasks/{uuid}/request")
        report = await get_json(client, "/maintenance")
    [aside] = _set_aside(context_dir, uuid)
    assert aside.name.startswith(f"{uuid}.completed.")
    assert snapshot_dir(aside) == copy
    assert report["orphans"]["set_aside"] == {"count": 1, "items": [aside.name]}
