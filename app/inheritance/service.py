"""Finding the earlier run of a task and reading what it left behind: its final summary,
planning history and metadata."""

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from app.context.store import ContextStore
from app.db.models import Task
from app.errors import NotFound, StorageError
from app.final_summaries.service import KIND as FINAL_SUMMARY
from app.final_summaries.service import read_final_summary
from app.inheritance import repository
from app.inheritance.message import Previous, inherited_message, notification_comment
from app.jobs.queue import ACTIVE, JobQueue
from app.storage.jsonl import iter_lines_backward
from app.storage.layout import PLANNING, SUMMARIES
from app.task_key import TaskKey
from app.tokens.counters import TextCounter

_POLL_S = 0.2
_TRIES = 5  # earlier runs tried, newest first, when one's files cannot be read

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inherited:
    """The initial context message for a new task, and the record kept of it."""

    content: str
    record: dict[str, Any]  # tasks.inheritance


class InheritanceService:
    def __init__(self, store: ContextStore, jobs: JobQueue, *, wait_s: float) -> None:
        self.store = store
        self.jobs = jobs
        self.wait_s = wait_s

    async def task(self, task_uuid: str) -> Task:
        """The task's row, for what it inherited (set at creation, never changed after), read
        with its head as every task read is (missing files answer as they do elsewhere)."""
        return (await self.store.head(task_uuid)).task

    async def candidates(self, key: TaskKey, user: str | None, limit: int) -> list[Task]:
        """Finished tasks with this key and user, newest completion first."""
        async with self.store.db.reader() as session:
            return await repository.finished_runs(session, key, user, limit)

    async def candidates_ready(
        self, key: TaskKey, user: str | None, limit: int
    ) -> list[tuple[Task, bool]]:
        """:meth:`candidates`, each with whether its final summary is written."""
        tasks = await self.candidates(key, user, limit)
        return list(zip(tasks, await self.store.final_summaries_ready(tasks), strict=True))

    async def prepare(
        self, key: TaskKey, user: str | None, counter: TextCounter, limit: int
    ) -> Inherited | None:
        """The message (at most ``limit`` tokens) that carries the newest earlier run whose
        files can be read into a new one, if there is one."""
        for task in await self.candidates(key, user, limit=_TRIES):
            try:
                previous = await self._read(task, limit)
            except (NotFound, StorageError, OSError) as exc:  # deleted, cleaned up, removed
                log.warning("task %s: cannot be inherited from: %s", task.uuid, exc)
                continue
            content, facts = await asyncio.to_thread(
                inherited_message, previous, limit, counter.count_text
            )
            completed = previous.completed_at.isoformat() if previous.completed_at else None
            record = {
                "from_uuid": previous.uuid,
                "status": previous.status,
                "completed_at": completed,
                "error_message": previous.error_message,
                **facts,
                "max_summary_tokens": limit,
                "notification_comment": notification_comment(previous),
            }
            return Inherited(content=content, record=record)
        return None

    async def _read(self, task: Task, limit: int) -> Previous:
        summary, source = await self._summary(task.uuid)
        room = limit * 8  # characters: more planning than could ever fit
        # Under the lock: a delete or cleanup cannot take the files away while they are read.
        async with self.store.locked(task.uuid) as locked:
            path = self.store.task_dir(locked.task) / PLANNING
            entries, dropped = await asyncio.to_thread(_latest_planning, path, room)
        return Previous(
            uuid=task.uuid,
            status=task.status,
            completed_at=task.completed_at,
            error_message=task.error_message,
            summary=summary,
            summary_source=source,
            planning=entries,
            planning_dropped=dropped,
        )

    async def _summary(self, task_uuid: str) -> tuple[str | None, str]:
        """The final summary; while its job is under way, wait up to ``wait_s`` for it, then
        fall back to the latest condense summary."""
        deadline = time.monotonic() + self.wait_s
        while True:
            async with self.store.locked(task_uuid) as locked:
                directory = self.store.task_dir(locked.task)
                text = await asyncio.to_thread(read_final_summary, directory)
                if text is not None:
                    return text, "final_summary"
                job = await self.jobs.latest(task_uuid, FINAL_SUMMARY)
                if job is None or job.status not in ACTIVE or time.monotonic() >= deadline:
                    condensed = await asyncio.to_thread(_latest_condense, directory / SUMMARIES)
                    return (condensed, "condense_summary") if condensed else (None, "none")
            await asyncio.sleep(_POLL_S)


def _latest_planning(path: Path, room: int) -> tuple[list[dict[str, Any]], int]:
    """The latest planning entries whose text fits ``room`` characters (the newest always), and
    how many older ones were left out; read from the end, so only what is kept is read."""
    kept: list[dict[str, Any]] = []
    size = 0
    for entry, length in _records_backward(path):
        if kept and size + length > room:
            break
        kept.insert(0, entry)
        size += length
    # Journal ids run 1, 2, 3...: those before the oldest kept were left out.
    return kept, (kept[0]["id"] - 1 if kept else 0)


def _latest_condense(path: Path) -> str | None:
    for record, _ in _records_backward(path):
        if record.get("kind") == "condense":
            summary: str | None = record.get("summary")
            return summary
    return None


def _records_backward(path: Path) -> Iterator[tuple[dict[str, Any], int]]:
    """A journal's records, newest first, with their line lengths (a torn line is skipped)."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        for line in iter_lines_backward(f, f.seek(0, os.SEEK_END)):
            try:
                yield orjson.loads(line), len(line)
            except orjson.JSONDecodeError:  # a torn last line of a crashed append
                continue
