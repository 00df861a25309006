"""Per-task mutual exclusion, within this process and across processes.

An asyncio lock orders this process's coroutines; a second lock orders the processes. On SQLite
(one machine) that is an ``fcntl.flock`` on a lock file; on PostgreSQL it is a session advisory
lock, so that workers on different hosts sharing CONTEXT_DIR serialise too. Both are taken
without blocking and retried with short sleeps, so waiting never ties up a worker thread, the
event loop or a database connection; both vanish with the process that held them.
"""

import asyncio
import errno
import fcntl
import hashlib
import logging
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, suppress
from pathlib import Path
from typing import Protocol

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.storage.layout import Layout

log = logging.getLogger(__name__)

_MAX_BACKOFF_S = 0.005
_NOT_WRITABLE = {errno.EACCES, errno.EROFS}
_UNLOCK = "SELECT pg_advisory_unlock(:key)"
_GLOBAL = "\x00global"  # the name of the lock around migration and startup reconciliation


class NamedLocks:
    """One asyncio lock per name, in this process, while a coroutine holds or waits for it:
    the lock lives as long as one refers to it (a waiter does), so a name never gets a second
    lock while its first is held or waited for."""

    def __init__(self) -> None:
        self._held: weakref.WeakValueDictionary[Hashable, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def __call__(self, name: Hashable) -> asyncio.Lock:
        lock = self._held.get(name)
        if lock is None:
            lock = self._held[name] = asyncio.Lock()
        return lock


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class ProcessLocks(Protocol):
    """Named locks that exclude other processes (not other coroutines of this one)."""

    def hold(
        self, name: str, before_creating: Callable[[], Awaitable[None]] | None
    ) -> AbstractAsyncContextManager[None]: ...

    def try_hold(self, name: str) -> AbstractAsyncContextManager[bool]:
        """The lock if no other process holds it (one attempt); yields whether it is held."""
        ...

    def discard(self, name: str) -> None: ...

    async def close(self) -> None: ...


class TaskLocks:
    def __init__(self, processes: ProcessLocks) -> None:
        self._processes = processes
        self._entries: dict[str, _Entry] = {}

    @asynccontextmanager
    async def hold(
        self, task_uuid: str, *, before_creating: Callable[[], Awaitable[None]] | None = None
    ) -> AsyncIterator[None]:
        """Hold the task's lock. With ``before_creating``, a missing lock file is made only after
        it returns (it raises to refuse: a uuid no task has must not leave a file behind)."""
        entry = self._entries.setdefault(task_uuid, _Entry())
        entry.users += 1
        try:
            async with entry.lock, self._processes.hold(task_uuid, before_creating):
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[task_uuid]

    @asynccontextmanager
    async def try_hold(self, task_uuid: str) -> AsyncIterator[bool]:
        """Hold the task's lock if no one holds it or waits for it, without waiting; yields
        whether it is held. (A lock just released to a waiter that has not run yet is free,
        but taking it would wait for that waiter: its caller may hold what the waiter needs
        next, the database's write lock for one.)"""
        if self.in_use(task_uuid):
            yield False
            return
        entry = self._entries[task_uuid] = _Entry()
        entry.users += 1
        try:
            await entry.lock.acquire()  # a new lock: taken at once
            try:
                async with self._processes.try_hold(task_uuid) as held:
                    yield held
            finally:
                entry.lock.release()
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[task_uuid]

    @asynccontextmanager
    async def try_hold_each(self, task_uuids: Iterable[str]) -> AsyncIterator[set[str]]:
        """:meth:`try_hold` each task's lock; yields those held (the others are let go at
        once, for no one to wait behind a try that failed)."""
        async with AsyncExitStack() as holding:
            held = set()
            for task_uuid in task_uuids:
                attempt = AsyncExitStack()
                if await attempt.enter_async_context(self.try_hold(task_uuid)):
                    holding.push_async_callback(attempt.aclose)
                    held.add(task_uuid)
                else:
                    await attempt.aclose()
            yield held

    def in_use(self, task_uuid: str) -> bool:
        """Whether a coroutine of this process holds the task's lock or waits for it (a try
        would fail)."""
        return task_uuid in self._entries

    def discard(self, task_uuid: str) -> None:
        """Remove the task's lock file, its task gone; call it holding the lock. Whoever waits
        on the removed file finds, once it has the lock, that the file is no longer the one
        at its path, and locks the path afresh (refused there, like any unknown task)."""
        self._processes.discard(task_uuid)

    @asynccontextmanager
    async def hold_global(self) -> AsyncIterator[None]:
        """The one lock of the whole service: migration and startup reconciliation."""
        async with self.hold(_GLOBAL):
            yield

    async def close(self) -> None:
        await self._processes.close()


class FileLocks:
    """flock on one file per task under the layout's lock directory."""

    def __init__(self, layout: Layout) -> None:
        self._layout = layout

    @asynccontextmanager
    async def hold(
        self, name: str, before_creating: Callable[[], Awaitable[None]] | None
    ) -> AsyncIterator[None]:
        layout = self._layout
        path = layout.global_lock_path() if name == _GLOBAL else layout.lock_path(name)
        try:
            fd = await flock(path, create=before_creating is None)
        except FileNotFoundError:
            assert before_creating is not None
            await before_creating()
            fd = await flock(path)
        try:
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    @asynccontextmanager
    async def try_hold(self, name: str) -> AsyncIterator[bool]:
        try:
            fd = _open_lock_file(self._layout.lock_path(name), create=False)
        except FileNotFoundError:  # the task is gone
            yield False
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield _still_at(self._layout.lock_path(name), fd)
        finally:
            os.close(fd)

    def discard(self, name: str) -> None:
        with suppress(FileNotFoundError):
            os.unlink(self._layout.lock_path(name))

    async def close(self) -> None:
        pass


class AdvisoryLocks:
    """PostgreSQL session advisory locks, all held on one connection of this process.

    One connection serves every task (a connection per held lock would exhaust the pool under
    many tasks); its queries are a few hundred microseconds and queue on an asyncio lock. The
    key is the first 64 bits of a hash of the name: a collision only serialises two tasks.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._connection: AsyncConnection | None = None
        self._turn = asyncio.Lock()

    async def _scalar(self, sql: str, key: int) -> object:
        async with self._turn:
            for attempt in (1, 2):
                if self._connection is None:
                    connection = await self._engine.connect()
                    # Autocommit: a session lock outlives transactions, and no transaction may
                    # stay open on this connection while locks are held.
                    self._connection = await connection.execution_options(
                        isolation_level="AUTOCOMMIT"
                    )
                try:
                    return (await self._connection.execute(text(sql), {"key": key})).scalar()
                except DBAPIError as exc:
                    lost, self._connection = self._connection, None
                    await lost.invalidate()
                    if not exc.connection_invalidated or attempt == 2:
                        raise
                    # The server ended the session and with it every lock it held: holders
                    # here lost their exclusion. Nothing can give it back; say so, go on.
                    log.error("the advisory lock connection was lost; its locks were released")
            raise AssertionError("unreachable")

    @asynccontextmanager
    async def hold(
        self, name: str, before_creating: Callable[[], Awaitable[None]] | None
    ) -> AsyncIterator[None]:
        # No file is made, so before_creating has nothing to guard: the caller's own lookup
        # under the lock refuses an unknown task.
        key = advisory_key(name)
        delay = 0.0002
        while not await self._try_lock(key):
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF_S)
        try:
            yield
        finally:
            await asyncio.shield(self._scalar(_UNLOCK, key))

    @asynccontextmanager
    async def try_hold(self, name: str) -> AsyncIterator[bool]:
        key = advisory_key(name)
        if not await self._try_lock(key):
            yield False
            return
        try:
            yield True
        finally:
            await asyncio.shield(self._scalar(_UNLOCK, key))

    async def _try_lock(self, key: int) -> bool:
        # A query cancelled half-way would leave the shared connection unusable, so the attempt
        # always finishes; if its waiter was cancelled meanwhile, a lock it took is given back.
        attempt = asyncio.ensure_future(self._scalar("SELECT pg_try_advisory_lock(:key)", key))
        try:
            return bool(await asyncio.shield(attempt))
        except asyncio.CancelledError:
            if await attempt:
                await self._scalar(_UNLOCK, key)
            raise

    def discard(self, name: str) -> None:
        pass  # an advisory lock has no file to remove

    async def close(self) -> None:
        async with self._turn:
            if self._connection is not None:
                await self._connection.close()
                self._connection = None


def advisory_key(name: str) -> int:
    digest = hashlib.blake2b(name.encode(), digest_size=8, person=b"context-svc").digest()
    return int.from_bytes(digest, "big", signed=True)


def process_locks(layout: Layout, engine: AsyncEngine) -> ProcessLocks:
    """Advisory locks on PostgreSQL (any host), lock files otherwise (one machine)."""
    if engine.dialect.name == "postgresql":
        return AdvisoryLocks(engine)
    return FileLocks(layout)


async def flock(path: Path, *, create: bool = True) -> int:
    """Open ``path`` (made if missing, with ``create``) and take an exclusive flock on it;
    returns the descriptor holding it. A lock file that cannot be opened for writing (a
    read-only CONTEXT_DIR) is opened for reading: flock needs no write access, so reads go on
    and keep their exclusion; writes then fail on the files themselves."""
    while True:
        fd = _open_lock_file(path, create=create)
        delay = 0.0002
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _MAX_BACKOFF_S)
        except BaseException:
            os.close(fd)
            raise
        if _still_at(path, fd):
            return fd
        # The holder removed the file (its task was deleted) while this waited: a lock on it
        # excludes no one who opens the path now.
        os.close(fd)


def _open_lock_file(path: Path, *, create: bool) -> int:
    try:
        return os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    except OSError as exc:
        if exc.errno not in _NOT_WRITABLE:
            raise
        try:
            return os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise exc from None  # missing, and cannot be made: the store is not writable


def _still_at(path: Path, fd: int) -> bool:
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (at_path.st_dev, at_path.st_ino) == (held.st_dev, held.st_ino)
