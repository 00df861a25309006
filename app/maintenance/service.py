"""The maintenance overview (orphans), and cleanup.

Cleanup: finished tasks completed before a cutoff lose their row and their directory.

Candidates are read in batches, oldest first, by keyset on (completed_at, uuid), so a run
moves forward past tasks it skips or fails on and never takes the whole table into memory.
Each task is removed by ``TaskService.delete`` under the task lock (directory to .trash, row
deleted, directory removed), which a crash leaves for startup reconciliation to finish or undo;
several processes cleaning at once are therefore safe: the loser of a race is skipped.
"""

import asyncio
import dataclasses
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from enum import Enum

from app.config import Settings
from app.context.reconcile import find_orphans
from app.db.engine import Database
from app.errors import AppError, ErrorCode, InvalidInput, TaskNotFound
from app.lifecycle import FINISHED
from app.maintenance.schemas import CleanupReport, MaintenanceReport
from app.tasks import repository
from app.tasks.service import TaskService

log = logging.getLogger(__name__)

BATCH = 100
MAX_LISTED = 1000


class _Outcome(Enum):
    REMOVED = "removed"
    SKIPPED = "skipped"
    FAILED = "failed"


class MaintenanceService:
    def __init__(
        self,
        db: Database,
        tasks: TaskService,
        settings: Settings,
        *,
        batch: int = BATCH,
        max_listed: int = MAX_LISTED,
    ) -> None:
        self.db = db
        self.tasks = tasks
        self.settings = settings
        self.batch = batch
        self.max_listed = max_listed

    async def overview(self) -> MaintenanceReport:
        orphans = await find_orphans(self.tasks.store.layout, self.db, self.max_listed)
        return MaintenanceReport.model_validate({"orphans": dataclasses.asdict(orphans)})

    async def cleanup(
        self,
        older_than_days: int | None = None,
        *,
        dry_run: bool = False,
        stop: asyncio.Event | None = None,
    ) -> CleanupReport:
        """Remove (or, dry run, list) completed and failed tasks finished more than
        ``older_than_days`` days ago (default CLEANUP_DAYS); ``stop`` set ends the run early,
        between two tasks."""
        if older_than_days is None:
            if self.settings.cleanup.days == 0:
                # CLEANUP_DAYS=0 turns the periodic cleanup off; it must not turn a bare
                # request into "remove every finished task".
                raise InvalidInput(
                    "older_than_days is required when CLEANUP_DAYS is 0",
                    code=ErrorCode.OLDER_THAN_DAYS_REQUIRED,
                )
            older_than_days = self.settings.cleanup.days
        cutoff = datetime.now(UTC) - timedelta(days=older_than_days)
        counts = dict.fromkeys(_Outcome, 0)
        matched, listed = 0, list[str]()
        async with aclosing(self._candidates(cutoff)) as candidates:
            async for task_uuid in candidates:
                if stop is not None and stop.is_set():
                    log.info("cleanup stopped early, after %d candidates", matched)
                    break
                matched += 1
                if dry_run:
                    outcome = _Outcome.REMOVED
                else:
                    outcome = await self._remove(task_uuid, cutoff)
                    counts[outcome] += 1
                if outcome is _Outcome.REMOVED and len(listed) < self.max_listed:
                    listed.append(task_uuid)
        removed = counts[_Outcome.REMOVED]
        if removed or counts[_Outcome.FAILED]:
            log.info(
                "cleanup before %s: %d removed, %d skipped, %d failed",
                cutoff.isoformat(),
                removed,
                counts[_Outcome.SKIPPED],
                counts[_Outcome.FAILED],
            )
        return CleanupReport(
            cutoff=cutoff,
            older_than_days=older_than_days,
            dry_run=dry_run,
            matched=matched,
            removed=removed,
            skipped=counts[_Outcome.SKIPPED],
            failed=counts[_Outcome.FAILED],
            uuids=listed,
            uuids_omitted=(matched if dry_run else removed) - len(listed),
        )

    async def _candidates(self, cutoff: datetime) -> AsyncGenerator[str, None]:
        """Finished tasks completed before ``cutoff``, oldest first, read a batch at a time."""
        after: tuple[datetime, str] | None = None
        while True:
            async with self.db.reader() as session:
                rows = await repository.finished_before(session, cutoff, after, self.batch)
            for task_uuid, _ in rows:
                yield task_uuid
            if len(rows) < self.batch:
                return
            last_uuid, completed_at = rows[-1]
            after = completed_at, last_uuid

    async def _remove(self, task_uuid: str, cutoff: datetime) -> _Outcome:
        # Checked again now: the task may have been deleted, or deleted and created anew,
        # since its batch was read. Finished is a final status, so it cannot change before the
        # delete below takes the lock.
        async with self.db.reader() as session:
            found = await repository.completion(session, task_uuid)
        if found is None or found[0] not in FINISHED or not _before(found[1], cutoff):
            return _Outcome.SKIPPED
        try:
            await self.tasks.delete(task_uuid)
        except TaskNotFound:
            return _Outcome.SKIPPED
        except (AppError, OSError):
            # One broken task (files missing, permissions) must not stop the others'
            # cleanup; database errors do stop the run.
            log.exception("task %s: cleanup could not remove it", task_uuid)
            return _Outcome.FAILED
        return _Outcome.REMOVED


def _before(when: datetime | None, cutoff: datetime) -> bool:
    return when is not None and when < cutoff
