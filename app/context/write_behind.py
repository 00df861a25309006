"""The writer of this process's pending heads (:mod:`app.context.pending`) to the database.

While any are pending, a background round every ``head_flush_ms`` writes those of the tasks
whose locks are free; a read that must see every acknowledged append flushes its task, waiting
for the lock.

A round holds its tasks' locks while it writes, and an append to one of them waits that long.
On SQLite a round's transaction is one call of a worker thread through the driver's blocking
API (:meth:`app.db.engine.Database.write_at_once`): through aiosqlite each of its statements
was a hand-off to the database's thread and back, and a round held its locks ~4-5 ms.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, suppress
from functools import partial
from typing import NamedTuple

from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from app.context import heads
from app.context.pending import ContextKey, PendingHead, PendingHeads
from app.context.records import HeadState
from app.db.engine import Database, WriterBusy, in_session
from app.errors import InsufficientStorage, StorageUnavailable, TaskNotFound
from app.storage.locks import TaskLocks

log = logging.getLogger(__name__)

# While rounds keep failing, the wait before the next one doubles up to this.
FAILING_ROUNDS_EVERY_S = 5.0


class _Due(NamedTuple):
    """What some tasks have pending: their heads, and the tokens of their payloads served."""

    entries: list[tuple[ContextKey, PendingHead]]
    served: dict[str, int]


class _Written(NamedTuple):
    """What a write of pending heads found (``due``) and moved (``written``)."""

    due: _Due
    written: list[tuple[ContextKey, PendingHead]]


class WriteBehind:
    """``pending`` and the writing of it. ``on_written`` learns of each head written (its
    context's database head is now that one)."""

    def __init__(
        self,
        *,
        db: Database,
        locks: TaskLocks,
        every_s: float,
        on_written: Callable[[ContextKey, HeadState], None],
    ) -> None:
        self.db = db
        self.locks = locks
        self.pending = PendingHeads()
        # 0: no write-behind, every commit writes its head at once.
        self.every_s = every_s
        self._on_written = on_written
        self._flusher: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    def start(self) -> None:
        """Have what is pending written in rounds (something was just added)."""
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_while_pending())

    async def _flush_while_pending(self) -> None:
        # Nothing is lost when a round fails: the files hold the records. The next round tries
        # again, later each time while they keep failing (a full disk, a database gone), and
        # only the first failure of a run is logged in full.
        wait_s = self.every_s
        while len(self.pending) and not self._closing.is_set():
            with suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._closing.wait()
            if self._closing.is_set():
                return
            try:
                await self.flush(wait=False)
            except Exception as exc:  # the database failed the round: a connection lost, say
                failing = wait_s > self.every_s
                wait_s = min(wait_s * 2, max(self.every_s, FAILING_ROUNDS_EVERY_S))
                _log_failed_round(exc, again=failing, next_in_s=wait_s)
            else:
                wait_s = self.every_s

    async def flush(self, task_uuids: Iterable[str] | None = None, *, wait: bool = True) -> None:
        """Write the pending heads (of ``task_uuids``, or all) to the database. ``wait``: for
        each task's lock in turn (a read that must see every acknowledged append); otherwise
        the tasks whose locks are free, in one transaction, the others left to the next
        round."""
        tasks = self.pending.tasks()
        if task_uuids is not None:
            tasks &= set(task_uuids)
        if not tasks:
            return
        if wait:
            for task_uuid in sorted(tasks):
                try:
                    async with self.locks.hold(task_uuid, before_creating=_gone(task_uuid)):
                        await self.write({task_uuid})
                except TaskNotFound:
                    self.forget(task_uuid)
                except (InsufficientStorage, StorageUnavailable) as exc:
                    # A read needs no free space: it answers with the counters written so far.
                    log.warning("pending heads not written: %s", exc.message)
            return
        # Tasks in use are left to the next round before it begins: a round with nothing to
        # write takes no write lock.
        tasks = {t for t in tasks if not self.locks.in_use(t)}
        if not tasks or await self._round_at_once(tasks):
            return
        # The locks are tried once the transaction is begun (on SQLite, the database's write
        # lock held): a round that waits for another writer holds no task lock meanwhile, for
        # an append to that task to wait behind.
        async with AsyncExitStack() as held_locks:
            async with self.db.transaction() as session:
                held = await held_locks.enter_async_context(self.locks.try_hold_each(tasks))
                written = await self._write_in(session, self._due(held))
            self._settle(written)  # the locks still held

    async def _round_at_once(self, tasks: set[str]) -> bool:
        """On SQLite, a round of ``tasks`` whose locks are free written in one call of a
        worker thread, which waits for no other writer: whether it was (False: the database
        has no such writer, another process is writing, or SQLite keeps no write-ahead log,
        and nothing was)."""
        if self.db.blocking_writer is None:
            return False
        async with self.db.write_turn(), self.locks.try_hold_each(tasks) as held:
            due = self._due(held)
            if not (due.entries or due.served):
                return True
            try:
                written = await self.db.write_at_once(partial(_write_due, due))
            except WriterBusy:
                return False
            self._settle(written)
        return True

    async def write(self, task_uuids: set[str]) -> None:
        """Write these tasks' pending heads; hold their locks. The heads stay pending until
        written: a read that flushes meanwhile waits for the lock rather than finding nothing
        to wait for."""
        due = self._due(task_uuids)
        if due.entries or due.served:
            async with self.db.transaction() as session:
                written = await self._write_in(session, due)
            self._settle(written)

    def _due(self, task_uuids: set[str]) -> _Due:
        served = {t: self.pending.served[t] for t in task_uuids if t in self.pending.served}
        return _Due(self.pending.of_tasks(task_uuids), served)

    async def _write_in(self, session: AsyncSession, due: _Due) -> _Written:
        """Write these pending heads in the session's transaction (their tasks' locks held)."""
        return await in_session(session, partial(_write_due, due))

    def _settle(self, done: _Written) -> None:
        """After the commit of :meth:`_write_in` (the locks still held): what it wrote is no
        longer pending."""
        for key, _ in done.due.entries:
            self.pending.take(key)
        for key, entry in done.written:
            self._on_written(key, entry.head)
        for task_uuid, tokens in done.due.served.items():  # unless a payload served meanwhile
            if self.pending.served.get(task_uuid) == tokens:
                del self.pending.served[task_uuid]

    async def record_served(self, task_uuid: str, tokens: int) -> None:
        """Remember the counted tokens of a payload served: written with the pending heads
        (the LLM call it is for takes longer), or at once, skipped (not failed) when the store
        cannot take a write."""
        if self.every_s:
            self.pending.served[task_uuid] = tokens
            self.start()
            return
        try:
            async with self.db.transaction() as session:
                served = {task_uuid: tokens}
                await in_session(session, lambda c: heads.write_served(c, served))
        except (InsufficientStorage, StorageUnavailable) as exc:
            log.warning("task %s: payload tokens not recorded: %s", task_uuid, exc.message)

    def forget(self, task_uuid: str) -> None:
        """Drop a task's pending heads: the task is being deleted (hold its lock)."""
        self.pending.take_tasks({task_uuid})

    async def close(self) -> None:
        """Stop the rounds, the pending heads written. A round under way is let finish, not
        cancelled: a cancellation in the middle of its SQLite transaction can leave the
        connection holding the write lock until it is collected, and the last flush below
        would wait out the busy timeout behind it."""
        self._closing.set()
        if self._flusher is not None:
            await self._flusher
        await self.flush()  # what it cannot write, the next start adopts from the files


def _write_due(due: _Due, connection: Connection) -> _Written:
    """Write these pending heads in the connection's transaction (their tasks' locks held).
    Blocking."""
    written = heads.write_pending(connection, due.entries)
    heads.write_served(connection, due.served)
    return _Written(due, written)


def _log_failed_round(exc: Exception, *, again: bool, next_in_s: float) -> None:
    if isinstance(exc, (InsufficientStorage, StorageUnavailable)):
        log.warning("pending heads not written: %s; next try in %.1f s", exc.message, next_in_s)
    elif again:
        log.warning("pending heads still not written: %r; next try in %.1f s", exc, next_in_s)
    else:
        log.exception("pending heads not written; next try in %.1f s", next_in_s)


def _gone(task_uuid: str) -> Callable[[], Awaitable[None]]:
    """A lock's ``before_creating`` that refuses: a task without a lock file is gone."""

    async def refuse() -> None:
        raise TaskNotFound(task_uuid)

    return refuse
