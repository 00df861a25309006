"""Startup reconciliation: make directories agree with the task rows after a crash.

The database is authoritative for a task's status. Each task directory must sit where its
status says; a directory in .staging/ or .trash/ belongs to a create or delete that a crash
interrupted: it is finished (row committed) or undone (no row). What the service did not
write is never removed: a directory in a status location without a row is left where it is,
a second copy of a task's directory is set aside in .orphans/, and both are reported (with
rows whose directory is missing) by :func:`find_orphans`. Lock files of uuids without a row
(a delete cut short before removing its lock file) are removed.
"""

import asyncio
import logging
import shutil
from dataclasses import dataclass, field

from sqlalchemy import select

from app.db.engine import Database
from app.db.models import Task
from app.storage.layout import LOCATIONS, ORPHANS, STATUS_DIRS, Layout, canonical_uuid
from app.storage.locks import TaskLocks
from app.storage.threads import finish_in_thread

log = logging.getLogger(__name__)

MAX_LISTED = 100  # per kind of orphan, in a report
_STATUS_LOCATIONS = tuple(dict.fromkeys(STATUS_DIRS.values()))
_LOCK_SUFFIX = ".lock"


@dataclass
class Listed:
    """A bounded list: how many there are, and the first ``MAX_LISTED`` of them, sorted."""

    count: int = 0
    items: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, items: set[str], limit: int = MAX_LISTED) -> "Listed":
        return cls(len(items), sorted(items)[:limit])


@dataclass
class Orphans:
    """What the files and the rows disagree on, for an operator to look at."""

    # "{location}/{uuid}": a task directory in running/, paused/ or completed/ with no row
    directories_without_rows: Listed
    # entries of .orphans/: directories the service set aside rather than overwrite or remove
    set_aside: Listed
    # uuids of tasks whose directory is nowhere
    rows_without_directories: Listed


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
    """Fix every disagreement that can be fixed, report the orphans; returns how many
    directories were moved, set aside or removed."""
    found = await asyncio.to_thread(_listed, layout)
    statuses: dict[str, str] = {}
    async with db.reader() as session:
        for task_uuid, status in await session.execute(select(Task.uuid, Task.status)):
            if task_uuid in found:
                statuses[task_uuid] = status
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
    await _remove_stray_lock_files(layout, db, locks)
    _log_orphans(await find_orphans(layout, db))
    return fixed


async def _remove_stray_lock_files(layout: Layout, db: Database, locks: TaskLocks) -> None:
    """Remove the lock files of uuids without a row, each under its own lock (another process
    may be creating that very task: then its row is there by the time the lock is ours)."""
    names = await asyncio.to_thread(_lock_file_uuids, layout)
    if not names:
        return
    async with db.reader() as session:
        known = set(await session.scalars(select(Task.uuid).where(Task.uuid.in_(names))))
    for task_uuid in names - known:
        async with locks.hold(task_uuid), db.reader() as session:
            if await session.get(Task, task_uuid) is None:
                locks.discard(task_uuid)


def _lock_file_uuids(layout: Layout) -> set[str]:
    found = set()
    for entry in (layout.root / ".locks").iterdir():
        name = entry.name.removesuffix(_LOCK_SUFFIX)
        try:
            if entry.name.endswith(_LOCK_SUFFIX) and canonical_uuid(name) == name:
                found.add(name)
        except ValueError:
            continue  # startup.lock and anything else not a task's
    return found


async def find_orphans(layout: Layout, db: Database, limit: int = MAX_LISTED) -> Orphans:
    """The directories without rows and rows without directories, as of now.

    Safe while tasks are created and deleted: directories are listed before rows are read,
    and each disagreement found is looked at again after (a create commits its row before its
    directory appears; a delete moves the directory away before its row goes).
    """
    found = await asyncio.to_thread(_listed, layout)
    async with db.reader() as session:
        rows = set(await session.scalars(select(Task.uuid)))
    return await asyncio.to_thread(_orphans, layout, found, rows, limit)


def _orphans(layout: Layout, found: dict[str, list[str]], rows: set[str], limit: int) -> Orphans:
    without_rows = {
        f"{location}/{task_uuid}"
        for task_uuid, locations in found.items()
        if task_uuid not in rows
        for location in locations
        if location in _STATUS_LOCATIONS and layout.location_dir(location, task_uuid).is_dir()
    }
    without_directories = {
        task_uuid for task_uuid in rows - found.keys() if not layout.find(task_uuid)
    }
    set_aside = {entry.name for entry in (layout.root / ORPHANS).iterdir() if entry.is_dir()}
    return Orphans(
        directories_without_rows=Listed.of(without_rows, limit),
        set_aside=Listed.of(set_aside, limit),
        rows_without_directories=Listed.of(without_directories, limit),
    )


def _log_orphans(orphans: Orphans) -> None:
    for listed, what in (
        (orphans.directories_without_rows, "task directories with no task row (left alone)"),
        (orphans.set_aside, f"directories set aside in {ORPHANS}/"),
        (orphans.rows_without_directories, "tasks whose directory is missing"),
    ):
        if listed.count:
            log.error("%d %s: %s", listed.count, what, ", ".join(listed.items))


async def _reconcile_task(layout: Layout, db: Database, task_uuid: str) -> int:
    async with db.reader() as session:
        status = await session.scalar(select(Task.status).where(Task.uuid == task_uuid))
    expected = STATUS_DIRS.get(status or "")
    locations = await asyncio.to_thread(layout.find, task_uuid)
    if not locations or locations == [expected]:
        return 0
    return await finish_in_thread(_fix, layout, task_uuid, locations, expected)


def _fix(layout: Layout, task_uuid: str, locations: list[str], expected: str | None) -> int:
    if expected is None:
        unfinished = [loc for loc in locations if loc in (".staging", ".trash")]
        for location in unfinished:
            log.warning("task %s: removing the leftover of a %s", task_uuid, location[1:])
            shutil.rmtree(layout.location_dir(location, task_uuid), ignore_errors=True)
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
        if location in (expected, *_STATUS_LOCATIONS):
            if location != expected:  # not known to be the service's own: kept
                aside = layout.set_aside(task_uuid, location).name
                log.error(
                    "task %s: a second copy in %s/ set aside as %s", task_uuid, location, aside
                )
        else:
            log.warning("task %s: removing a stale copy in %s/", task_uuid, location)
            shutil.rmtree(layout.location_dir(location, task_uuid), ignore_errors=True)
    return len(locations) - 1
