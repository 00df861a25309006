"""Appending to and paging through a journal file with its own increasing key."""

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from app.context.records import utc_timestamp
from app.context.store import ContextStore, LockedTask
from app.errors import TaskNotWritable
from app.storage.jsonl import append_bytes, dumps_line, last_record, read_page, repair_tail
from app.storage.threads import finish_in_thread

T = TypeVar("T")


class JournalService:
    """One journal kind: ``file_name`` in the task directory, records numbered by ``key``.

    ``time_field`` names the record's timestamp as the original design's file of that kind
    does.
    """

    def __init__(
        self,
        store: ContextStore,
        *,
        file_name: str,
        key: str,
        time_field: str,
        max_page_bytes: int,
    ) -> None:
        self.store = store
        self.file_name = file_name
        self.key = key
        self.time_field = time_field
        self.max_page_bytes = max_page_bytes

    async def append(
        self,
        task_uuid: str,
        fields: dict[str, Any],
        then: Callable[[LockedTask, dict[str, Any]], Awaitable[None]] | None = None,
    ) -> dict[str, Any]:
        """Append a record; ``then`` runs with it while the task lock is still held."""
        async with self.store.locked(task_uuid) as locked:
            task = locked.task
            if task.status != "running":
                raise TaskNotWritable(task_uuid, task.status, "take records")
            path = self.store.task_dir(task) / self.file_name
            record = await finish_in_thread(self._append, path, fields)
            if then is not None:
                await then(locked, record)
            return record

    def _append(self, path: Path, fields: dict[str, Any]) -> dict[str, Any]:
        fsync = self.store.fsync
        repair_tail(path, fsync=fsync, context=str(path.parent.name))
        last = last_record(path)
        record = {self.key: (last[self.key] + 1) if last else 1, **fields}
        record.setdefault(self.time_field, utc_timestamp())
        append_bytes(path, dumps_line(record), fsync=fsync)
        return record

    async def page(
        self, task_uuid: str, after: int, limit: int, thread_id: int = 0
    ) -> tuple[list[dict[str, Any]], bool]:
        """Up to ``limit`` records after ``after`` (in a thread's directory for a thread's
        journal), and whether more follow them."""
        async with self.store.locked(task_uuid, thread_id) as locked:
            path = self.store.files(locked).directory / self.file_name
            # Under the lock, cut a torn tail so that `end` is a line boundary.
            end = await finish_in_thread(
                repair_tail, path, fsync=self.store.fsync, context=task_uuid
            )
            if end <= 0:
                return [], False
            last = await asyncio.to_thread(last_record, path)
            handle = await asyncio.to_thread(open, path, "rb")
        try:
            records = await asyncio.to_thread(
                read_page, handle, self.key, after, limit, end, self.max_page_bytes
            )
        finally:
            handle.close()
        more = bool(records) and last is not None and records[-1][self.key] < last[self.key]
        return records, more

    async def read(self, task_uuid: str, reader: Callable[[Path], T]) -> T:
        """What ``reader`` finds in the task's journal file, read under the task lock."""
        async with self.store.locked(task_uuid) as locked:
            path = self.store.files(locked).directory / self.file_name
            return await asyncio.to_thread(reader, path)
