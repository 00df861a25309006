"""The context store: every read and write of a task's contexts goes through here, and the
creation of a task's directory (its metadata.json and first messages, staged then moved into
place).

Writes to one task are serialised by the task lock (in-process and across processes). Every
access under the lock first checks the files against the committed head and repairs them if a
crash left them out of step (:func:`app.context.files.recover`). Appends close together may take
this process's copy of the task's row rather than read it again.

The store runs its parts: group commit of appends (:mod:`app.context.group_commit`), their
heads and counters in the database (:mod:`app.context.heads`), written behind in batches
(:mod:`app.context.write_behind`), the calibration of a task's token counts by reported usage
(:mod:`app.tokens.calibration`), and the blocking file work of a read's snapshot
(:mod:`app.context.snapshots`) and of a new task's or thread's directory
(:mod:`app.context.directories`).
"""

import asyncio
import dataclasses
import logging
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, Literal

from app.config import Settings
from app.context import heads
from app.context.checked import ParsedPrefixes
from app.context.directories import clear_the_way, create_files, stage_files
from app.context.files import (
    ContextFiles,
    PreparedView,
    Recovery,
    ViewToPrepare,
    Where,
    accept_loss,
    commit_marker,
    commit_prepared,
    prepared_path,
    prepared_view,
    rebuild,
    recover,
)
from app.context.group_commit import (
    AppendQueues,
    AppendResult,
    FollowUp,
    GroupOutcome,
    PendingAppend,
    is_small,
    resolve,
    write_appends,
)
from app.context.pending import ContextKey
from app.context.processes import CpuProcesses, in_a_process
from app.context.records import (
    HeadState,
    IdempotentResult,
    StatsDelta,
    refuse_reserved,
    utc_timestamp,
)
from app.context.shapes import Marker, SummaryRecord
from app.context.snapshots import (
    LOOP_PARSE_BYTES,
    Opened,
    holds_committed,
    open_if_whole,
    open_snapshot_files,
)
from app.context.write_behind import WriteBehind
from app.db.engine import Database, in_session, is_busy
from app.db.models import ContextHead, Task, Thread
from app.errors import (
    AppError,
    ContextFilesDamaged,
    ErrorCode,
    InsufficientStorage,
    StorageError,
    StorageUnavailable,
    TaskNotFound,
    TaskNotWritable,
    ThreadNotActive,
    ThreadNotFound,
)
from app.formats.costs import TokenCosts, TokenCounting
from app.storage.failures import storage_failure
from app.storage.file_work import FileWork, NotQuick, RanOn
from app.storage.jsonl import (
    CHUNK,
    first_damaged_line,
    size_of,
)
from app.storage.layout import (
    FINAL_SUMMARY,
    METADATA,
    STATUS_DIRS,
    Layout,
    context_dir,
)
from app.storage.locks import TaskLocks
from app.storage.threads import finish_in_thread
from app.tokens.calibration import CalibrationPolicy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LockedTask:
    """A task while its lock is held: the row, and one of its contexts (the root, thread 0, or
    a thread) with its head as committed in the database. ``threads`` holds the task's thread
    rows when the context is a thread or they were asked for."""

    task: Task
    head: HeadState
    thread_id: int = 0
    threads: dict[int, Thread] = field(default_factory=dict)
    # The row is this process's copy from a moment ago (see _RememberedRow): an append checks
    # it against the files in the call that writes them.
    from_memory: bool = False
    # current.jsonl opened with the row, when the lock was taken to read it (`opening_current`):
    # :meth:`ContextStore.open_snapshot` takes it, or the lock's release closes it.
    opened_current: "Opened | None" = field(default=None, repr=False, compare=False)

    @property
    def thread(self) -> Thread | None:
        return self.threads.get(self.thread_id) if self.thread_id else None


@dataclass
class Snapshot:
    """A committed view of one context file: ``head``'s byte count, ``prefetched`` first (a
    current.jsonl's first bytes, read as it was opened), then the rest from ``handle``.

    The handle stays valid when the task's directory moves or the file is replaced.
    """

    context: LockedTask
    head: HeadState
    handle: BinaryIO
    metadata: dict[str, Any]
    # The file's first bytes, read as it was opened (the handle is past them): a small
    # current.jsonl is served with no further blocking call.
    prefetched: bytes = b""

    def take_prefetched(self, limit: int) -> bytes:
        """Up to ``limit`` of the prefetched bytes not yet taken (b"" when none are left)."""
        taken, self.prefetched = self.prefetched[:limit], self.prefetched[limit:]
        return taken

    @property
    def task(self) -> Task:
        return self.context.task

    def close(self) -> None:
        self.handle.close()


# How long an append may take this process's copy of a running task's row instead of reading
# it: what it could miss is another process's calibration of the task (the status it checks
# against the task's directory), so appends close together (a call and its result) read once.
REMEMBERED_ROW_S = 1.0

# What the service counts of the work that may run on the event loop (FileWork).
FileWorkKind = Literal["append", "read"]


class _RowOutOfDate(Exception):
    """The files of a task no longer agree with this process's copy of its row."""


@dataclass
class _RememberedRow:
    task: Task
    committed: HeadState  # the database's head when read (or written since by this process)
    read_at: float


# Called after each group commit with the context and the heads before and after; returns
# what it led to (the condense trigger: a cut over the message cap, a condense queued).
AfterCommit = Callable[[LockedTask, HeadState, HeadState], Awaitable[FollowUp]]

# Starts the idempotency keys the service makes itself: no header value can hold it.
SERVICE_KEY = "\x1f"


class ContextStore:
    def __init__(
        self,
        *,
        db: Database,
        layout: Layout,
        locks: TaskLocks,
        counting: TokenCounting,
        settings: Settings,
        on_damaged_files: Callable[[], None] | None = None,
        on_file_work: Callable[[FileWorkKind, RanOn], None] | None = None,
        after_commit: AfterCommit | None = None,
        processes: CpuProcesses | None = None,
    ) -> None:
        self.db = db
        self.layout = layout
        self.locks = locks
        self.counting = counting
        self.calibration = CalibrationPolicy(
            low=settings.calibration.min,
            high=settings.calibration.max,
            smoothing=settings.calibration.smoothing,
        )
        self.fsync = settings.storage.fsync == "always"
        limit_s = settings.storage.inline_file_work_ms / 1000
        self.append_work = FileWork(
            limit_s, "appends' file work", on_run=_on_run_of(on_file_work, "append")
        )
        self.read_work = FileWork(limit_s, "context reads", on_run=_on_run_of(on_file_work, "read"))
        self.write_behind = WriteBehind(
            db=db,
            locks=locks,
            every_s=settings.storage.head_flush_ms / 1000,
            on_written=self._written_behind,
        )
        self._rows: dict[str, _RememberedRow] = {}  # running tasks' rows, by uuid
        self._parsed = ParsedPrefixes()  # what payloads found whole of each current.jsonl
        self._on_damaged_files = on_damaged_files
        self._max_message_bytes = settings.limits.max_message_bytes
        self._appends = AppendQueues(self._commit_group)
        self.after_commit = after_commit
        self._processes = processes

    # -- locking and lookup ---------------------------------------------------------------

    @asynccontextmanager
    async def locked(
        self,
        task_uuid: str,
        thread_id: int = 0,
        *,
        with_threads: bool = False,
        for_append: bool = False,
        opening_current: bool = False,
    ) -> AsyncIterator[LockedTask]:
        """Hold the task lock; yield its row and the committed head of one of its contexts,
        its directory in place. The lock is the task's: all its contexts share it.

        ``opening_current``: the caller will open a snapshot of current.jsonl; where the row is
        read through a blocking connection (SQLite), the file is opened in the same call.

        ``for_append``: an append to the root that reports no usage (so changes nothing of the
        row but what the write-behind keeps) may take this process's copy of the row from a
        moment ago (:class:`_RememberedRow`) instead of reading it."""

        async def require_task() -> None:  # lock files are made with their tasks
            async with self.db.statements() as session:
                if await session.get(Task, task_uuid) is None:
                    raise TaskNotFound(task_uuid)

        async with self.locks.hold(task_uuid, before_creating=require_task):
            context = None
            if for_append and not thread_id:
                context = self._remembered(task_uuid)
            if context is None:
                context = await self._read(
                    task_uuid, thread_id, with_threads, for_append, opening_current
                )
            try:
                yield context
            except ContextFilesDamaged:
                if self._on_damaged_files is not None:
                    self._on_damaged_files()
                raise
            finally:
                opened = context.opened_current
                if opened is not None and not opened.taken:
                    opened.handle.close()

    async def _read(
        self, task_uuid: str, thread_id: int, with_threads: bool, remember: bool, opening: bool
    ) -> LockedTask:
        """A context of a locked task as the database has it (with this process's pending
        head); remembered for the next appends with ``remember``, forgotten otherwise (the
        lock's holder may change the row). ``opening``: current.jsonl opened with it if it can
        be in the same blocking call."""
        pending = self.write_behind.pending
        if (thread_id or with_threads) and pending.has_threads(task_uuid):
            await self.write_behind.write({task_uuid})  # thread rows count their messages
        row, opened = await self._load_context(task_uuid, thread_id, opening)
        try:
            locked = await self._checked(task_uuid, thread_id, with_threads, remember, row)
        except BaseException:
            if opened is not None:
                opened.handle.close()
            raise
        if opened is not None:
            if opened.head == locked.head:
                return dataclasses.replace(locked, opened_current=opened)
            opened.handle.close()  # opened for another head than the one committed: reopen
        return locked

    async def _checked(
        self,
        task_uuid: str,
        thread_id: int,
        with_threads: bool,
        remember: bool,
        row: tuple[Task, HeadState | None, bool] | None,
    ) -> LockedTask:
        """The locked context of the row read, its threads read if asked for; TaskNotFound,
        ThreadNotFound or HEAD_MISSING when the row does not have it."""
        pending = self.write_behind.pending
        threads: dict[int, Thread] = {}
        if row is not None and row[2] and (thread_id or with_threads):
            async with self.db.statements() as session:  # the task's rows held still by its lock
                threads = await heads.load_threads(session, task_uuid)
        self._rows.pop(task_uuid, None)
        if row is None:
            raise TaskNotFound(task_uuid)
        task, head, _ = row
        served = pending.served.get(task_uuid)
        if served is not None:  # the row is this request's own copy: not written back
            task.served_tokens = served
        if thread_id and thread_id not in threads:
            raise ThreadNotFound(task_uuid, thread_id)
        if head is None:
            raise StorageError(
                f"task {task_uuid} has no context head for thread {thread_id}",
                code=ErrorCode.HEAD_MISSING,
            )
        if remember and task.status == "running" and not thread_id:
            # A copy: the head handed to the lock's holder is its own.
            committed = head.copy()
            self._rows[task_uuid] = _RememberedRow(task, committed, time.monotonic())
        return LockedTask(
            task, self._over_committed(task_uuid, thread_id, head), thread_id, threads
        )

    async def _load_context(
        self, task_uuid: str, thread_id: int, opening: bool
    ) -> tuple[tuple[Task, HeadState | None, bool] | None, "Opened | None"]:
        """:func:`heads.load_context`, the task's directory then where its status puts it: in
        one blocking call where the database has a blocking way in (SQLite), and with
        ``opening`` current.jsonl opened for the head the context then has (None when it
        needs a repair first, or is more to check than the event loop takes:
        :meth:`open_snapshot` does that).

        The blocking call runs on the event loop while such reads are quick there, in a worker
        thread otherwise: the hand-off to a thread and back cost a payload more than the read.
        On the loop it waits for no lock held elsewhere, moves nothing and parses little: the
        database busy (SQLite's WAL mode keeps readers from writers, but not always), a
        directory to move, bytes rewritten since they were found whole, and the whole call is
        made again in a thread."""
        blocking, quick_reader = self.db.blocking_reader, self.db.quick_reader
        if blocking is not None and quick_reader is not None:
            # Read here, not in a worker thread: the event loop owns this process's pending
            # heads (the task's own cannot change while its lock is held).
            pending = self.write_behind.pending.get((task_uuid, thread_id))

            def load(
                quick: bool,
            ) -> tuple[tuple[Task, HeadState | None, bool] | None, Opened | None]:
                try:
                    with (quick_reader if quick else blocking).connect() as connection:
                        row = heads.load_context_blocking(connection, task_uuid, thread_id)
                except Exception as exc:
                    if quick and is_busy(exc):
                        raise NotQuick("the database is busy") from exc
                    raise
                if row is None:
                    return None, None
                task, committed, _ = row
                self._ensure_directory(task, quick=quick)
                if not opening or committed is None:
                    return row, None
                left = None if pending is None else pending.over(committed.extent)
                head = committed if left is None else left.head
                directory = self.task_dir(task)
                files = ContextFiles(context_dir(directory, thread_id))
                context = (task_uuid, thread_id)
                if quick and not self._quick_to_open(directory, context, head, "current"):
                    return row, None
                opened = open_if_whole(
                    directory, files, head, "current", self._parsed, context, quick=quick
                )
                return row, opened

            return await self.read_work.run_quickly(load)
        async with self.db.statements() as session:
            row = await heads.load_context(session, task_uuid, thread_id)
        if row is not None:
            task = row[0]
            await self.read_work.run_quickly(lambda quick: self._ensure_directory(task, quick))
        return row, None

    def _quick_to_open(
        self, task_dir: Path, context: ContextKey, head: HeadState, file_name: str
    ) -> bool:
        """Whether opening a context's file for ``head`` is small work: its metadata.json
        small, and for current.jsonl one read of it, little of it to parse (the rest found
        whole before: only hashed)."""
        if size_of(task_dir / METADATA) > LOOP_PARSE_BYTES:
            return False
        if file_name == "messages":
            return True
        size = head.current_bytes
        return size <= CHUNK and self._parsed.unparsed_bytes(context, size) <= LOOP_PARSE_BYTES

    def _remembered(self, task_uuid: str) -> LockedTask | None:
        """The root of a locked task from this process's copy of its row, if that is recent.
        Whether it is still true (the task's directory where a running task's is, the files the
        size of its head: no other process wrote since) the append's write checks, in the same
        blocking call (:class:`_RowOutOfDate`)."""
        row = self._rows.get(task_uuid)
        if row is None or time.monotonic() - row.read_at > REMEMBERED_ROW_S:
            return None
        pending = self.write_behind.pending.get((task_uuid, 0))
        head = row.committed if pending is None else pending.head
        return LockedTask(row.task, head, from_memory=True)

    async def other_context(self, locked: LockedTask, thread_id: int) -> LockedTask:
        """Another context of the locked task (the lock already held), its files recovered."""
        async with self.db.statements() as session:
            row = await session.get(ContextHead, (locked.task.uuid, thread_id))
        if row is None:
            raise ThreadNotFound(locked.task.uuid, thread_id)
        head = self._over_committed(locked.task.uuid, thread_id, heads.head_state(row))
        other = LockedTask(locked.task, head, thread_id, locked.threads)
        return dataclasses.replace(other, head=await self.recovered_head(other, reading=True))

    def _over_committed(self, task_uuid: str, thread_id: int, committed: HeadState) -> HeadState:
        """A context's head from the database's (read under the task's lock): with what this
        process has pending over it, which :meth:`PendingHeads.view` keeps or drops."""
        pending = self.write_behind.pending.view((task_uuid, thread_id), committed)
        return committed if pending is None else pending.head

    async def heads(self, task_uuid: str) -> dict[int, HeadState]:
        """The heads of a task's contexts by thread id (with what this process has pending
        over the database's), read without the task lock."""
        async with self.db.statements() as session:
            rows = await heads.load_heads(session, task_uuid)
        pending = self.write_behind.pending
        found = {}
        for row in rows:
            committed = heads.head_state(row)
            # Read without the lock: this process may have written a newer head since, and
            # appended over it. What is pending is looked at, not dropped.
            left = pending.over((task_uuid, row.thread_id), committed)
            found[row.thread_id] = committed if left is None else left.head
        return found

    async def create_context(self, locked: LockedTask, thread: Thread) -> None:
        """A new thread of the locked task: its empty files, then its row and head in one
        transaction (a leftover directory of a start that never committed is emptied)."""
        directory = context_dir(self.task_dir(locked.task), thread.thread_id)
        await finish_in_thread(create_files, directory, fsync=self.fsync)
        async with self.db.transaction() as session:
            heads.add_context(session, thread)

    def costs(self, task: Task) -> TokenCosts:
        """What a message costs in each format, as the task's counter counts."""
        return self.counting.costs(task.token_counter)

    def task_dir(self, task: Task) -> Path:
        return self.layout.task_dir(task.status, task.uuid)

    def files(self, locked: LockedTask) -> ContextFiles:
        """The files of the locked context (a thread's live under its task's directory)."""
        return ContextFiles(context_dir(self.task_dir(locked.task), locked.thread_id))

    def _ensure_directory(self, task: Task, quick: bool = False) -> None:
        """The task's directory where its status puts it, moved there if a crash left it
        elsewhere (``quick``: NotQuick instead, the move being the worker thread's)."""
        expected = STATUS_DIRS[task.status]
        if self.layout.location_dir(expected, task.uuid).is_dir():
            return
        if quick:
            raise NotQuick(f"task {task.uuid}: its directory to move")
        found = self.layout.find(task.uuid)
        if not found:
            raise StorageError(
                f"the files of task {task.uuid} are missing",
                code=ErrorCode.TASK_FILES_MISSING,
                details={"uuid": task.uuid},
            )
        log.warning("task %s: moving its directory from %s to %s", task.uuid, found[0], expected)
        self.layout.move(task.uuid, found[0], expected)

    # -- a task's directory ---------------------------------------------------------------

    async def stage_task(
        self, task: Task, metadata: dict[str, Any], initial: list[dict[str, Any]]
    ) -> tuple[HeadState, StatsDelta]:
        """Write a new task's files in ``.staging/``: its metadata.json and its ``initial``
        messages (the task lock held, no row yet). Returns the head and counters they make."""
        staging = self.layout.location_dir(".staging", task.uuid)
        return await finish_in_thread(
            stage_files,
            staging,
            metadata,
            initial,
            self.counting,
            task.token_counter,
            max_message_bytes=self._max_message_bytes,
            fsync=self.fsync,
        )

    async def place_staged(self, task_uuid: str) -> None:
        """Move a staged task's directory to where a running task's lives."""
        await finish_in_thread(self.layout.move, task_uuid, ".staging", "running")

    async def discard_staged(self, task_uuid: str) -> None:
        """Remove a staged directory whose create failed."""
        staging = self.layout.location_dir(".staging", task_uuid)
        await finish_in_thread(shutil.rmtree, staging, ignore_errors=True)

    async def clear_the_way(self, task_uuid: str) -> None:
        """Make room for a new task's directory (its row does not exist; the lock is held).

        A directory in a status location has no row, so its files are not a task's the
        service knows, perhaps newer than a restored database: set aside intact, never
        overwritten. One in .trash/ is the rest of a delete that committed: removed.
        """
        await finish_in_thread(clear_the_way, self.layout, task_uuid)

    async def final_summaries_ready(self, tasks: list[Task]) -> list[bool]:
        """Whether each of these tasks has its final_summary.txt written."""

        def ready() -> list[bool]:
            return [(self.task_dir(t) / FINAL_SUMMARY).is_file() for t in tasks]

        return await asyncio.to_thread(ready)

    async def summary_backend(self, locked: LockedTask) -> str | None:
        """The summary backend the locked task chose at creation (metadata.json), if any."""
        return await asyncio.to_thread(ContextFiles(self.task_dir(locked.task)).summary_backend)

    # -- reads ----------------------------------------------------------------------------

    @asynccontextmanager
    async def reading_messages(self, locked: LockedTask) -> AsyncIterator[BinaryIO]:
        """messages.jsonl of a locked context, open for reading (in worker threads) up to a
        committed head's byte count: the file only grows, so the handle may outlive the lock."""
        handle = await self.open_messages(locked)
        try:
            yield handle
        finally:
            handle.close()

    async def open_messages(self, locked: LockedTask) -> BinaryIO:
        """:meth:`reading_messages` for a caller that closes the handle itself, later."""
        return await asyncio.to_thread(open, self.files(locked).messages, "rb")

    async def snapshot(
        self, task_uuid: str, file_name: Literal["messages", "current"], thread_id: int = 0
    ) -> Snapshot:
        """Open a committed view of ``messages`` or ``current``; the caller closes it."""
        async with self.locked(task_uuid, thread_id) as locked:
            return await self.open_snapshot(locked, file_name)

    async def open_snapshot(
        self, locked: LockedTask, file_name: Literal["messages", "current"]
    ) -> Snapshot:
        """:meth:`snapshot` of a context whose task lock is held."""
        # Usually the files agree with the head and nothing needs repair: one blocking call
        # checks that and opens them (on the event loop while that is quick: a payload's fixed
        # cost was mostly hand-offs to worker threads).
        opened = locked.opened_current
        if (
            opened is not None
            and file_name == "current"
            and not opened.taken
            and opened.head == locked.head
        ):
            opened.taken = True
        else:
            task_dir, files = self.task_dir(locked.task), self.files(locked)
            context, head = (locked.task.uuid, locked.thread_id), locked.head

            def open_whole(quick: bool) -> Opened | None:
                return open_if_whole(
                    task_dir, files, head, file_name, self._parsed, context, quick=quick
                )

            opened = await self.read_work.run_quickly(
                open_whole,
                may_be_quick=self.read_work.on_loop_now()
                and self._quick_to_open(task_dir, context, head, file_name),
            )
        if opened is not None:
            prefetched, opened.prefetched = opened.prefetched, b""  # the snapshot's to free
            return Snapshot(locked, locked.head, opened.handle, opened.metadata, prefetched)
        head = await self.recovered_head(locked, reading=True)
        if file_name == "current":
            head = await self._whole_current(locked, head)
        handle, metadata = await asyncio.to_thread(
            open_snapshot_files, self.task_dir(locked.task), self.files(locked), file_name
        )
        return Snapshot(context=locked, head=head, handle=handle, metadata=metadata)

    async def head(self, task_uuid: str, thread_id: int = 0) -> LockedTask:
        """The context with its head recovered (and the task row as the repair left it)."""
        async with self.locked(task_uuid, thread_id) as locked:
            recovery = await self._recover(locked, reading=True)
            task = locked.task
            if recovery.changed:  # the repair moved the row's statistics: answer with them
                async with self.db.reader() as session:
                    task = await session.get(Task, task_uuid) or task
            return dataclasses.replace(locked, task=task, head=recovery.head)

    async def recovered_head(self, locked: LockedTask, *, reading: bool = False) -> HeadState:
        """The committed head, after repairing the files if needed. Hold the task lock.
        ``reading``: a read needs no free space, so a repair the disk refuses (full, read-only)
        is skipped with a warning rather than failing it."""
        return (await self._recover(locked, reading=reading)).head

    async def _whole_current(self, locked: LockedTask, head: HeadState) -> HeadState:
        """The head, after rebuilding current.jsonl if a line of it no longer parses: it is
        derived from messages.jsonl, so its damage is repaired, not served. (Damage in
        messages.jsonl itself makes the rebuild fail: a 500 corrupt_record before any byte.)"""
        files = self.files(locked)
        damaged = await asyncio.to_thread(first_damaged_line, files.current, head.current_bytes)
        if damaged is None:
            return head
        log.error(
            "task %s thread %d: current.jsonl is damaged at byte %d: rebuilding it",
            locked.task.uuid,
            locked.thread_id,
            damaged,
        )
        rebuilt, _ = await finish_in_thread(rebuild, files, fsync=self.fsync)
        if rebuilt != head:
            recovery = Recovery(rebuilt, changed=True)
            await self._save(locked, recovery, rebuilt, StatsDelta(), [])
        return rebuilt

    async def _recover(self, locked: LockedTask, *, reading: bool = False) -> Recovery:
        task = locked.task
        where = Where(task.uuid, locked.thread_id)
        context = str(where)
        files = self.files(locked)
        try:
            recovery = await finish_in_thread(
                recover, files, locked.head, fsync=self.fsync, where=where
            )
        except OSError as exc:
            if not reading or storage_failure(exc) is None:
                raise
            if not await asyncio.to_thread(holds_committed, files, locked.head):
                raise
            log.warning("%s: files not repaired (%s): serving what was committed", context, exc)
            return Recovery(head=locked.head)
        if recovery.changed:
            try:
                await self._save(locked, recovery, recovery.head, StatsDelta(), [])
            except (InsufficientStorage, StorageUnavailable) as exc:
                if not reading:
                    raise
                # The files agree with the repaired head: serve it; a later access commits it.
                log.warning("%s: repair not committed: %s", context, exc.message)
        return recovery

    # -- appends --------------------------------------------------------------------------

    async def append(
        self,
        task_uuid: str,
        messages: list[dict[str, Any]],
        idempotency_key: str | None,
        thread_id: int = 0,
    ) -> AppendResult:
        """Append a posted batch to a context; returns the append response and whether it was
        a replay. (The service's own records go through :meth:`append_locked`.)"""
        refuse_reserved(messages)
        if idempotency_key is not None and thread_id:
            # Keys are registered per task: a thread's get its id in front, after a control
            # character no HTTP header can carry (so no client key can look like it).
            idempotency_key = f"{SERVICE_KEY}thread-{thread_id}:{idempotency_key}"
        future = self._appends.submit((task_uuid, thread_id), messages, idempotency_key)
        # A client that goes away must not cancel a commit other clients wait on.
        return await asyncio.shield(future)

    async def append_locked(
        self,
        locked: LockedTask,
        messages: list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        ended_parent: bool = False,
    ) -> tuple[HeadState, dict[str, Any]]:
        """Append one batch to a context whose task lock is held (no group commit); returns
        the new head and the append response. ``ended_parent``: the service's own record of
        a child may go into a thread that has ended."""
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        pending = PendingAppend(messages, idempotency_key, future)
        head = await self._write_and_save(locked, [pending], ended_parent=ended_parent)
        response, _ = future.result()
        return head, response

    async def _commit_group(self, context: ContextKey, group: list[PendingAppend]) -> None:
        """Commit a group of appends to a context and answer them."""
        # A reported usage may calibrate the task: that reads the row as it is now.
        reports = any("usage" in m for p in group for m in p.messages)
        async with self.locked(*context, for_append=not reports) as locked:
            try:
                new_head = await self._write_and_save(locked, group, answer=False)
            except _RowOutOfDate:  # another process wrote since this one's copy: read the row
                locked = await self._read(
                    *context, with_threads=False, remember=True, opening=False
                )
                new_head = await self._write_and_save(locked, group, answer=False)
        follow_up = FollowUp()
        if self.after_commit is not None and new_head != locked.head:
            follow_up = await self.after_commit(locked, locked.head, new_head)
        resolve(group, follow_up)

    async def _write_and_save(
        self,
        locked: LockedTask,
        group: list[PendingAppend],
        *,
        answer: bool = True,
        ended_parent: bool = False,
    ) -> HeadState:
        """Write a group to the locked context and commit it; the futures get their answers
        (one per append) here or, with ``answer=False``, from the caller."""
        task, head = locked.task, locked.head
        if task.status != "running":
            raise TaskNotWritable(task.uuid, task.status, "take messages")
        thread = locked.thread
        if thread is not None and thread.status != "active" and not ended_parent:
            raise ThreadNotActive(task.uuid, thread.thread_id, thread.status)
        keys = [p.idempotency_key for p in group if p.idempotency_key]
        outcome = await self.append_work.run(
            partial(
                write_appends,
                self.task_dir(task),
                self.files(locked),
                Where(task.uuid, locked.thread_id),
                head,
                group,
                await self._known_keys(locked, keys),
                counting=self.counting,
                token_counter=task.token_counter,
                max_message_bytes=self._max_message_bytes,
                fsync=self.fsync,
                only_if_agreed=locked.from_memory,
            ),
            may_block_loop=self._may_block_loop(locked, group, keys),
        )
        if outcome is None:
            raise _RowOutOfDate
        if self._deferrable(locked, outcome):
            self.write_behind.pending.add(
                (task.uuid, locked.thread_id),
                head,
                outcome.head,
                outcome.stats,
                outcome.new_keys,
                datetime.now(UTC),
            )
            self.write_behind.start()
        elif outcome.recovery.changed or outcome.head != head:  # refusals change nothing
            await self._save(
                locked, outcome.recovery, outcome.head, outcome.stats, outcome.new_keys
            )
        for pending, result in zip(group, outcome.results, strict=True):
            pending.result = result
        if answer:
            resolve(group, FollowUp())
        return outcome.head

    def _may_block_loop(
        self, locked: LockedTask, group: list[PendingAppend], keys: list[str]
    ) -> bool:
        """Whether a group's file work is only a few syscalls on small data, fit for the event
        loop (while that stays quick there): its files are checked against this process's own
        head (a repair may read a whole file), no database is read with it (a key's lookup on
        SQLite is), its token counter is loaded, and its messages are small (counting a long
        one's tokens takes milliseconds)."""
        return (
            self.append_work.on_loop_now()
            and locked.from_memory
            and not (keys and self.db.blocking_reader is not None)
            and self.counting.loaded(locked.task.token_counter)
            and is_small(group)
        )

    async def _known_keys(
        self, locked: LockedTask, keys: list[str]
    ) -> Callable[[], dict[str, IdempotentResult]]:
        """Which of a group's ``keys`` the context has registered: the database's, then this
        process's pending ones, as a function the group's blocking call makes (in a worker
        thread, then). On SQLite the database is read there, through a blocking connection:
        through aiosqlite the read cost a keyed append more CPU than the rest of its commit
        (its thread hand-offs)."""
        if not keys:
            return dict
        task_uuid = locked.task.uuid
        deferred = self.write_behind.pending.get((task_uuid, locked.thread_id))
        pending = {k: deferred.keys[k] for k in keys if k in deferred.keys} if deferred else {}
        blocking = self.db.blocking_reader
        if blocking is None:
            async with self.db.reader() as session:
                registered = await heads.load_idempotency_keys(session, task_uuid, keys)
            return lambda: registered | pending

        def read() -> dict[str, IdempotentResult]:
            with blocking.connect() as connection:
                return heads.load_idempotency_keys_blocking(connection, task_uuid, keys) | pending

        return read

    def _deferrable(self, locked: LockedTask, outcome: GroupOutcome) -> bool:
        """Whether the database may learn of this group later (see app.context.pending): it
        wrote records, and it neither repaired the files nor calibrates the task (both change
        what the next access reads from the task's row)."""
        if not self.write_behind.every_s or outcome.recovery.changed or outcome.head == locked.head:
            return False
        reported = outcome.stats.reported_prompt_tokens
        return reported is None or locked.task.served_tokens is None or bool(locked.thread_id)

    async def accept_loss(self, task_uuid: str, thread_id: int = 0) -> list[int] | None:
        """An operator's repair of a context whose messages.jsonl lost committed bytes: what
        remains becomes the context, the lost seqs are recorded and never issued again.
        Returns the lost seq range, or None if the context was not damaged."""
        async with self.locked(task_uuid, thread_id) as locked:
            repaired = await finish_in_thread(
                accept_loss,
                self.files(locked),
                locked.head,
                utc_timestamp(),
                fsync=self.fsync,
                where=Where(task_uuid, thread_id),
            )
            if repaired is None:
                return None
            head, totals, lost = repaired
            recovery = Recovery(head, totals, stats_are_totals=True, changed=True)
            await self._save(locked, recovery, head, StatsDelta(), [])
            return lost

    async def commit_marker(
        self,
        locked: LockedTask,
        head: HeadState,
        marker: Marker,
        summary: SummaryRecord | None,
        *,
        compactions: int,
    ) -> tuple[HeadState, Marker]:
        """Append a compaction's or rewind's marker (and its summaries.jsonl record) to the
        locked context at ``head``, rebuild current.jsonl and commit the new head."""
        new_head, record = await finish_in_thread(
            commit_marker, self.files(locked), head, marker, summary, fsync=self.fsync
        )
        await self.save_head(locked, new_head, compactions=compactions)
        return new_head, record

    async def prepare_marker(
        self, locked: LockedTask, base: HeadState, marker: Marker
    ) -> PreparedView | None:
        """Render the current.jsonl a compaction marker after ``base`` makes, without the task
        lock (``locked`` as it was when ``base`` was read): the long part of a compaction's
        commit, so that appends meanwhile do not wait for it. None if the files could not be
        written there (the directory moved with a status change): commit the usual way."""
        files = self.files(locked)
        job = ViewToPrepare(files, base, marker, self.fsync, prepared_path(files))
        try:
            # Rendering is pure Python, tens of milliseconds for a large context. (A thread
            # renders it again by path: the directory moved, it fails there too.)
            here = partial(prepared_view, job)
            return await in_a_process(self._processes, prepared_view, job, here)
        except OSError as exc:
            where = Where(locked.task.uuid, locked.thread_id)
            log.info("%s: marker not prepared (%s)", where, exc)
            return None
        except BaseException:  # cancelled, or a process that died leaving part of it
            job.path.unlink(missing_ok=True)
            raise

    async def commit_prepared(
        self,
        locked: LockedTask,
        head: HeadState,
        prepared: PreparedView,
        marker: Marker,
        summary: SummaryRecord | None,
        *,
        compactions: int,
    ) -> tuple[HeadState, Marker] | None:
        """:meth:`commit_marker` with current.jsonl prepared (:meth:`prepare_marker`): what the
        lock covers is the records appended since it was prepared, the marker, a rename and the
        head. None, with nothing written, if a marker was appended since."""
        done = await finish_in_thread(
            commit_prepared, self.files(locked), prepared, head, marker, summary, fsync=self.fsync
        )
        if done is not None:
            await self.save_head(locked, done[0], compactions=compactions)
        return done

    async def save_head(self, locked: LockedTask, head: HeadState, *, compactions: int = 0) -> None:
        """Commit a head rebuilt by a compaction or rewind. Hold the task lock."""
        await self._commit_head(locked, head, heads.compaction_counters(compactions), [])

    async def _save(
        self,
        locked: LockedTask,
        recovery: Recovery,
        head: HeadState,
        stats: StatsDelta,
        new_keys: list[IdempotentResult],
    ) -> None:
        task = locked.task
        keys = [*recovery.idempotent_results, *new_keys]
        values = heads.stats_values(recovery, stats, locked.thread_id)
        # Only a usage appended now answers the payload served last (not one found in history
        # by a recovery).
        reported = stats.reported_prompt_tokens
        # Payloads served are remembered for the root only (app/payloads/service.py): a
        # thread's report would be compared with another context's payload.
        if reported is not None and task.served_tokens is not None and not locked.thread_id:
            values |= self._calibrated(task, task.served_tokens, reported)
        thread_values: dict[str, Any] = {}
        if locked.thread_id:
            thread_values = heads.thread_message_count(recovery, stats)
        await self._commit_head(locked, head, values, keys, thread_values)

    def _calibrated(self, task: Task, served: int, reported: int) -> dict[str, Any]:
        """Task values after an LLM reported ``reported`` prompt tokens for our ``served``."""
        factor = self.calibration.update(task.token_calibration, served, reported)
        if factor is None:
            log.info(
                "task %s: reported %d prompt tokens for %d counted: not calibrating on that",
                task.uuid,
                reported,
                served,
            )
        elif factor != task.token_calibration:
            log.info(
                "task %s: token calibration %.4f -> %.4f (%d counted, %d reported)",
                task.uuid,
                task.token_calibration,
                factor,
                served,
                reported,
            )
        return heads.calibration_values(factor)

    async def _commit_head(
        self,
        locked: LockedTask,
        head: HeadState,
        task_values: dict[str, Any],
        keys: list[IdempotentResult],
        thread_values: dict[str, Any] | None = None,
    ) -> None:
        """Move the committed head, update the task (and thread) row and register keys: one
        transaction."""
        now = datetime.now(UTC)
        key = (locked.task.uuid, locked.thread_id)
        # Written first, and pending until then: a read that flushes waits for the lock.
        pending = self.write_behind.pending.get(key)
        async with self.db.transaction() as session:
            if pending is not None:
                due = [(key, pending)]
                await in_session(session, lambda c: heads.write_pending(c, due))
            await heads.commit_head(session, key, head, task_values, keys, thread_values, now)
        self.write_behind.pending.take(key)
        # The row moved with more than the head: the next append reads it (the copy would fail
        # its check against the files anyway, after a write call for nothing).
        self._rows.pop(locked.task.uuid, None)
        if "served_tokens" in task_values:  # a report used it: a later batch must not revive it
            self.write_behind.pending.served.pop(locked.task.uuid, None)

    # -- write-behind (app/context/write_behind.py) ---------------------------------------

    async def record_served(self, task_uuid: str, tokens: int) -> None:
        """Remember the counted tokens of a payload served, for the next reported usage: the
        bookkeeping of a read (:meth:`WriteBehind.record_served`)."""
        await self.write_behind.record_served(task_uuid, tokens)

    async def flush(self, task_uuids: Iterable[str] | None = None, *, wait: bool = True) -> None:
        """Write this process's pending heads (of ``task_uuids``, or all) to the database
        (:meth:`WriteBehind.flush`)."""
        await self.write_behind.flush(task_uuids, wait=wait)

    async def flush_held(self, task_uuid: str) -> None:
        """:meth:`flush` of a task whose lock is held."""
        await self.write_behind.write({task_uuid})

    def forget(self, task_uuid: str) -> None:
        """Drop a task's pending heads: the task is being deleted (hold its lock)."""
        self.write_behind.forget(task_uuid)

    def _written_behind(self, key: ContextKey, head: HeadState) -> None:
        """A pending head is now the database's: so is this process's copy of the row."""
        task_uuid, thread_id = key
        remembered = self._rows.get(task_uuid)
        if remembered is not None and not thread_id:
            remembered.committed = head

    async def adopt_unflushed(self) -> int:
        """At startup: commit what running contexts' files hold past their database heads (a
        process that stopped without writing its pending heads), so the tasks table counts
        every acknowledged append before anything reads it. Returns how many were behind."""
        async with self.db.reader() as session:
            rows = await heads.load_running_heads(session)
        if not rows:
            return 0

        def behind() -> list[tuple[str, int]]:
            def size(task_uuid: str, thread_id: int) -> int:
                directory = self.layout.location_dir(STATUS_DIRS["running"], task_uuid)
                return size_of(ContextFiles(context_dir(directory, thread_id)).messages)

            return [(t, n) for t, n, committed in rows if size(t, n) > committed]

        found = await asyncio.to_thread(behind)
        for task_uuid, thread_id in found:
            with suppress(AppError):  # damage or a vanished task: the next access says so
                await self.head(task_uuid, thread_id)
        return len(found)

    async def close(self) -> None:
        """Stop the write-behind, its pending heads written."""
        await self.write_behind.close()


def _on_run_of(
    on_file_work: Callable[[FileWorkKind, RanOn], None] | None, kind: FileWorkKind
) -> Callable[[RanOn], None] | None:
    """What tells ``on_file_work`` where a run of ``kind`` went."""
    return None if on_file_work is None else partial(on_file_work, kind)
