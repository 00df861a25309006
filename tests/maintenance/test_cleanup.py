"""POST /maintenance/cleanup over the real app: exactly the old completed and failed tasks go,
row and directory together; a dry run and a bad body change nothing."""

import asyncio
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.lifespan import open_services
from app.maintenance.service import MaintenanceService
from tests.support.app import running_app
from tests.support.cleanup import (
    assert_gone,
    assert_present,
    backdate,
    cleanup_settings,
    make_task,
    task_rows,
)
from tests.support.errors import assert_error
from tests.support.files import snapshot_dir
from tests.support.timestamps import parse_utc
from tests.support.waits import settle


def assert_report(report: dict[str, Any], **expected: Any) -> None:
    """The report holds ``expected``, and its counts add up."""
    assert {k: report[k] for k in expected} == expected, report
    if not report["dry_run"]:
        assert report["matched"] == report["removed"] + report["skipped"] + report["failed"]
    listed = report["matched"] if report["dry_run"] else report["removed"]
    assert listed == len(report["uuids"]) + report["uuids_omitted"]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """The periodic cleanup off: its first round comes within a minute of startup and would
    rightly remove the tasks a test has just made old before the test asks for it."""
    return cleanup_settings(tmp_path)


@pytest.fixture
def context_dir(settings: Settings) -> Path:
    return settings.context_dir


async def test_cleanup_removes_exactly_the_old_finished_tasks(
    client: httpx.AsyncClient, settings: Settings, context_dir: Path
) -> None:
    """Completed 40 and failed 35 days ago go (rows in every table, directories, 404);
    finished 29 days ago or just now, and running or paused tasks created 60 days ago, stay.
    The dry run before reports the same set, oldest first, and changes nothing."""
    old_completed = await make_task(client, "completed")
    old_failed = await make_task(client, "failed")
    kept = {
        status: await make_task(client, status)
        for status in ("completed", "failed", "running", "paused")
    }
    recent = await make_task(client, "completed")
    await backdate(settings, [old_completed], days=40)
    await backdate(settings, [old_failed], days=35)
    await backdate(settings, [recent], days=29)
    await backdate(settings, [kept["running"], kept["paused"]], days=60)
    await settle(client)  # the final-summary jobs of the finished tasks write into their dirs
    expected = [old_completed, old_failed]
    for task_uuid in expected:
        assert all(task_rows(context_dir, task_uuid).values())  # head, jobs and keys to remove
    before_files = snapshot_dir(context_dir)
    before_tasks = (await client.get("/tasks")).json()

    dry = await client.post("/maintenance/cleanup", json={"dry_run": True, "older_than_days": 30})
    assert dry.status_code == 200, dry.text
    assert_report(dry.json(), dry_run=True, matched=2, removed=0, uuids=expected, uuids_omitted=0)
    assert snapshot_dir(context_dir) == before_files
    assert (await client.get("/tasks")).json() == before_tasks

    started = datetime.now(UTC)
    response = await client.post("/maintenance/cleanup", json={"older_than_days": 30})
    assert response.status_code == 200, response.text
    report = response.json()
    assert_report(report, dry_run=False, older_than_days=30, matched=2, removed=2, uuids=expected)
    cutoff = parse_utc(report["cutoff"])
    assert started - timedelta(days=30) <= cutoff <= datetime.now(UTC) - timedelta(days=30)

    for task_uuid in expected:
        await assert_gone(client, context_dir, task_uuid)
    for status, task_uuid in [*kept.items(), ("completed", recent)]:
        await assert_present(client, context_dir, task_uuid, status)
    listed = {t["uuid"] for t in (await client.get("/tasks")).json()["tasks"]}
    assert listed == {*kept.values(), recent}

    again = await client.post("/maintenance/cleanup", json={"older_than_days": 30})
    assert again.status_code == 200, again.text
    assert_report(again.json(), matched=0, removed=0, uuids=[])


async def test_a_bare_cleanup_takes_cleanup_days(tmp_path: Path) -> None:
    """No body: the age is CLEANUP_DAYS (30 by default). The periodic cleanup's first round
    may come meanwhile, and either may be the one that removes the task made 40 days old; after
    the request it is gone, and the one finished 29 days ago is not."""
    settings = cleanup_settings(tmp_path, cleanup={"days": 30})
    async with running_app(settings) as client:
        old, recent = await make_task(client, "completed"), await make_task(client, "completed")
        await backdate(settings, [old], days=40)
        await backdate(settings, [recent], days=29)
        await settle(client)
        started = datetime.now(UTC)
        response = await client.post("/maintenance/cleanup")
        assert response.status_code == 200, response.text
        report = response.json()
        assert report["older_than_days"] == 30
        assert report["uuids"] in ([], [old])
        cutoff = parse_utc(report["cutoff"])
        assert started - timedelta(days=30) <= cutoff <= datetime.now(UTC) - timedelta(days=30)
        await assert_gone(client, settings.context_dir, old)
        await assert_present(client, settings.context_dir, recent, "completed")


async def test_zero_days_takes_every_finished_task(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """older_than_days 0: everything completed or failed before now; nothing else."""
    finished = [await make_task(client, "completed"), await make_task(client, "failed")]
    others = {status: await make_task(client, status) for status in ("running", "paused")}
    await settle(client)
    response = await client.post("/maintenance/cleanup", json={"older_than_days": 0})
    assert response.status_code == 200, response.text
    assert_report(response.json(), older_than_days=0, removed=2, uuids=finished)
    for task_uuid in finished:
        await assert_gone(client, context_dir, task_uuid)
    for status, task_uuid in others.items():
        await assert_present(client, context_dir, task_uuid, status)


@pytest.mark.parametrize(
    "body",
    [
        {"older_than_days": -1},
        {"older_than_days": 36_501},
        {"older_than_days": 1.5},
        {"older_than_days": "a month"},
        {"dry_run": "maybe"},
        {"days": 30},
        [],
        "cleanup",
    ],
)
async def test_bad_body_is_422_and_removes_nothing(
    client: httpx.AsyncClient, settings: Settings, context_dir: Path, body: Any
) -> None:
    old = await make_task(client, "completed")
    await backdate(settings, [old], days=400)
    await settle(client)
    before = snapshot_dir(context_dir)
    assert_error(await client.post("/maintenance/cleanup", json=body), 422, "validation_error")
    assert snapshot_dir(context_dir) == before
    await assert_present(client, context_dir, old, "completed")


async def test_unparsable_body_is_422(client: httpx.AsyncClient, context_dir: Path) -> None:
    finished = await make_task(client, "completed")
    await settle(client)
    response = await client.post(
        "/maintenance/cleanup",
        content=b'{"older_than_days": 0',
        headers={"Content-Type": "application/json"},
    )
    assert_error(response, 422, "invalid_json")
    await assert_present(client, context_dir, finished, "completed")


async def test_without_cleanup_days_the_age_must_be_given(tmp_path: Path) -> None:
    """CLEANUP_DAYS=0 turns the periodic cleanup off; a bare request is then refused rather
    than read as "every finished task"; an explicit age still works."""
    settings = cleanup_settings(tmp_path)
    async with running_app(settings) as client:
        finished = await make_task(client, "completed")
        await settle(client)
        for body in (None, {}, {"dry_run": True}):
            response = await client.post("/maintenance/cleanup", json=body)
            assert_error(response, 422, "older_than_days_required")
        await assert_present(client, settings.context_dir, finished, "completed")
        response = await client.post("/maintenance/cleanup", json={"older_than_days": 0})
        assert response.status_code == 200, response.text
        assert response.json()["uuids"] == [finished]
        await assert_gone(client, settings.context_dir, finished)


async def test_batches_ties_and_the_capped_list(
    client: httpx.AsyncClient, settings: Settings, context_dir: Path
) -> None:
    """Small batches walk every candidate once, tasks finished at the same instant included
    (ordered by uuid); the uuid list stops at its cap and says how many it left out."""
    tied = sorted([await make_task(client, "completed") for _ in range(3)])
    oldest = await make_task(client, "failed")
    newer = await make_task(client, "completed")
    await backdate(settings, [oldest], days=50)
    await backdate(settings, tied, days=45)  # one instant for the three
    await backdate(settings, [newer], days=40)
    await settle(client)
    in_order = [oldest, *tied, newer]
    async with open_services(settings) as services:
        maintenance = MaintenanceService(
            services.db, services.tasks, settings, batch=2, max_listed=2
        )
        dry = (await maintenance.cleanup(30, dry_run=True)).model_dump()
        assert_report(dry, matched=5, uuids=in_order[:2], uuids_omitted=3)
        full = await MaintenanceService(services.db, services.tasks, settings, batch=2).cleanup(
            30, dry_run=True
        )
        assert full.uuids == in_order
        report = (await maintenance.cleanup(30)).model_dump()
        assert_report(report, matched=5, removed=5, uuids=in_order[:2], uuids_omitted=3)
    for task_uuid in in_order:
        await assert_gone(client, context_dir, task_uuid)


async def test_concurrent_cleanups_share_the_work(
    client: httpx.AsyncClient, settings: Settings, context_dir: Path
) -> None:
    """Two cleanups at once (the API and a second set of services, as a second process
    would): each task is removed by exactly one; the other skips it, never fails on it."""
    uuids = [await make_task(client, "completed", f"task {i}") for i in range(40)]
    await backdate(settings, uuids, days=31)
    await settle(client)
    async with open_services(settings) as services:
        maintenance = MaintenanceService(services.db, services.tasks, settings, batch=7)
        response, other = await asyncio.gather(
            client.post("/maintenance/cleanup", json={"older_than_days": 30}),
            maintenance.cleanup(30),
        )
    assert response.status_code == 200, response.text
    first, second = response.json(), other.model_dump()
    for report in (first, second):
        assert_report(report, failed=0)
    assert first["removed"] + second["removed"] == len(uuids)
    assert sorted(first["uuids"] + second["uuids"]) == sorted(uuids)
    for task_uuid in uuids:
        await assert_gone(client, context_dir, task_uuid)


async def test_a_task_whose_directory_was_removed_by_hand_is_removed_too(
    client: httpx.AsyncClient,
    settings: Settings,
    context_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operator already deleted one directory by hand (seed 000 §14.1's `find ...
    -exec rm -rf`): its row goes too, with a warning, and so do the others."""
    uuids = [await make_task(client, "completed", f"task {i}") for i in range(3)]
    await backdate(settings, uuids[:1], days=50)
    await backdate(settings, uuids[1:], days=40)
    await settle(client)
    shutil.rmtree(context_dir / "completed" / uuids[0])
    response = await client.post("/maintenance/cleanup", json={"older_than_days": 30})
    assert response.status_code == 200, response.text
    assert_report(
        response.json(), matched=3, removed=3, failed=0, uuids=[uuids[0], *sorted(uuids[1:])]
    )
    for task_uuid in uuids:
        await assert_gone(client, context_dir, task_uuid)
    warnings = [r for r in caplog.records if r.name == "app.tasks.service"]
    about_it = [r for r in warnings if uuids[0] in r.getMessage()]
    assert [r.levelname for r in about_it if r.levelname != "INFO"] == ["WARNING"]
