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
        expected = STATUS_DIRS.get(statuses.get(task_uuid, ""), None)
        if locations == [expected]:
            continue
        async with locks.hold(task_uuid):
            fixed += await asyncio.to_thread(_fix, layout, task_uuid, locations, expected)
    return fixed


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
