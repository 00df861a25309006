"""Startup reconciliation: make directories agree with the task rows after a crash.

The database is authoritative for a task's status. Each task directory must sit where its
status says; a directory in .staging/ or .trash/ belongs to a create or delete that a crash
interrupted: it is finished (row committed) or undone (no row).
"""

import asyncio
import logging
import shutil

from sqlalchemy import select

from app.db.engine import Database
from app.db.models import Task
from app.storage.layout import LOCATIONS, STATUS_DIRS, Layout, canonical_uuid
from app.storage.locks import TaskLocks

log = logging.getLogger(__name__)


def _listed(layout: Layout) -> dict[str, list[str]]:
    """uuid -> the locations holding a directory for it."""
    found: dict[str, list[str]] = {}
    for location in LOCATIONS:
        for entry in (layout.root / location).iterdir():
            try:
                task_uuid = canonical_uuid(entry.name)
            except ValueError:
                continue
            if entry.is_dir() and entry.name == task_uuid:
                found.setdefault(task_uuid, []).append(location)
    return found


async def reconcile(layout: Layout, db: Database, locks: TaskLocks) -> int:
    """Fix every disagreement; returns how many directories were moved or removed."""
    found = await asyncio.to_thread(_listed, layout)
    statuses: dict[str, str] = {}
    async with db.reader() as session:
        for task_uuid, status in await session.execute(select(Task.uuid, Task.status)):
            if task_uuid in found:
                statuses[task_uuid] = status
            else:
                log.error("task %s: its directory is missing", task_uuid)
    fixed = 0
    for task_uuid, locations in found.items():
        if locations == [STATUS_DIRS.get(statuses.get(task_uuid, ""))]:
            continue
        # Other processes may be serving meanwhile: what was listed may have moved on, so
        # the task is looked at again under its lock before anything is moved or removed.
        async with locks.hold(task_uuid):
            try:
                fixed += await _reconcile_task(layout, db, task_uuid)
            except OSError:  # one task's trouble must not keep the service from starting
                log.exception("task %s: its directories could not be reconciled", task_uuid)
    return fixed


async def _reconcile_task(layout: Layout, db: Database, task_uuid: str) -> int:
    async with db.reader() as session:
        status = await session.scalar(select(Task.status).where(Task.uuid == task_uuid))
    expected = STATUS_DIRS.get(status or "")
    locations = await asyncio.to_thread(layout.find, task_uuid)
    if not locations or locations == [expected]:
        return 0
    return await asyncio.to_thread(_fix, layout, task_uuid, locations, expected)


def _fix(layout: Layout, task_uuid: str, locations: list[str], expected: str | None) -> int:
    if expected is None:
        unfinished = [loc for loc in locations if loc in (".staging", ".trash")]
        for location in unfinished:
            log.warning("task %s: removing the leftover of a %s", task_uuid, location[1:])
            shutil.rmtree(layout.location_dir(location, task_uuid), ignore_errors=True)
        for location in set(locations) - set(unfinished):
            log.error("task %s: %s/ directory has no task row; left alone", task_uuid, location)
        return len(unfinished)
    if expected not in locations:
        source = next(
            loc for loc in (".trash", ".staging", *STATUS_DIRS.values()) if loc in locations
        )
        log.warning("task %s: moving its directory from %s to %s", task_uuid, source, expected)
        layout.move(task_uuid, source, expected)
        locations = [loc for loc in locations if loc != source]
        return 1 + _fix(layout, task_uuid, [*locations, expected], expected)
    for location in locations:
        if location != expected:
            log.warning("task %s: removing a stale copy in %s/", task_uuid, location)
            shutil.rmtree(layout.location_dir(location, task_uuid), ignore_errors=True)
    return len(locations) - 1
