"""Engine and session factories.

On SQLite, writers open their transactions with BEGIN IMMEDIATE: a deferred transaction that
reads and then writes can fail at once with SQLITE_BUSY when another process wrote in between,
whereas IMMEDIATE waits for the lock (busy_timeout) and then succeeds. Within one process,
write transactions also queue on an asyncio lock: SQLite takes one writer at a time anyway, and
its busy handler waits by sleeping (up to 100 ms a turn), which an asyncio queue avoids.

A write the disk refuses (SQLite's SQLITE_FULL, PostgreSQL's disk_full, a read-only database)
leaves :meth:`Database.transaction` as the domain error of :mod:`app.storage.failures`. The
SQLite write-ahead log is checkpointed and truncated by :meth:`Database.checkpoint` (periodic,
and at shutdown) and kept to ``_WAL_SIZE_LIMIT`` after each reset, so that a log grown while
the disk was full gives its room back once writes work again.

On SQLite the hot reads (a task's row and head, for every payload) also have a synchronous way
in, :attr:`Database.blocking_reader`: done beside the file work they go with (on the event loop
while that is quick, else in a worker thread), a read costs no hand-off to aiosqlite's thread,
where it costs five (a cursor, the statement, the rows, closing, the rollback), ~0.1 ms of a
payload's latency each. :attr:`Database.quick_reader` is the same without a busy wait, for the
reads made on the event loop: one that would wait for a lock fails at once (:func:`is_busy`)
and is made again in a worker thread. :attr:`Database.blocking_writer` writes that way
(:meth:`Database.write_at_once`): a whole transaction in one call of the database's own
writer thread, for the write-behind's rounds, which hold task locks while they write.
"""

import asyncio
import logging
import sqlite3
import traceback
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, create_engine, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from app.storage.failures import storage_failure

log = logging.getLogger(__name__)

T = TypeVar("T")

_BEGIN_OPTION = "sqlite_begin"
_NO_BEGIN = "none"  # each statement its own transaction
_BUSY_TIMEOUT_MS = 30_000
# A checkpoint waits this long at most for readers to finish (it holds back writers meanwhile);
# one that cannot finish is tried again at the next round.
_CHECKPOINT_BUSY_MS = 200
_WAL_SIZE_LIMIT = 16 * 1024 * 1024
# A SQLite connection's: whether SQLite kept the write-ahead log on it.
_KEEPS_WAL = "keeps_wal"


@dataclass(frozen=True)
class Database:
    engine: AsyncEngine
    reader: async_sessionmaker[AsyncSession]
    writer: async_sessionmaker[AsyncSession]
    # Reads of one statement, or of rows the task lock keeps still: on SQLite no BEGIN, each
    # statement a transaction of its own (in WAL mode a consistent snapshot by itself). Three
    # round trips to the database's thread fewer on every GET /request; elsewhere the reader.
    statements: async_sessionmaker[AsyncSession]
    # SQLite (a file) only: the same database through the driver's blocking API, read-only.
    # None elsewhere: use the sessions. The quick one waits for no lock (the event loop's).
    blocking_reader: Engine | None
    quick_reader: Engine | None
    # SQLite (a file) only: writes through the driver's blocking API, BEGIN IMMEDIATE with no
    # busy wait, in a thread of their own. None elsewhere.
    blocking_writer: Engine | None
    writer_thread: ThreadPoolExecutor | None
    serialize_writes: bool
    _write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A write transaction, committed when the block ends without an exception; begun
        (on SQLite: its write lock held) before the block runs, so that a time the block takes,
        such as a job's lease, does not include the wait for another writer."""
        try:
            async with (
                self.write_turn(),
                self.writer() as session,
                session.begin(),
            ):
                await session.connection()  # SQLAlchemy would begin at the first statement
                yield session
        except asyncio.CancelledError as exc:
            _free_interrupted_statement(exc)
            raise
        except DBAPIError as exc:
            failure = storage_failure(exc)
            if failure is None:
                raise
            raise failure from exc

    def write_turn(self) -> asyncio.Lock | nullcontext[None]:
        """This process's turn to write (on SQLite, where writers queue here rather than in
        SQLite's busy handler)."""
        return self._write_lock if self.serialize_writes else nullcontext()

    async def write_at_once(self, work: Callable[[Connection], T]) -> T:
        """``work`` in one write transaction of :attr:`blocking_writer`, committed if it
        returns, in one call of :attr:`writer_thread`, in this process's :meth:`write_turn`.
        Raises :class:`WriterBusy` at once (nothing written) when another process is writing,
        and where SQLite keeps no write-ahead log: its commit would wait for every reader.

        The thread is the database's own: its caller holds locks (this process's write turn,
        tasks' locks) that must not wait behind the I/O threads' other work. Cancelled, it
        still returns only once the transaction has ended, so that those locks are not let go
        while it may yet commit."""
        assert self.writer_thread is not None
        done = asyncio.get_running_loop().run_in_executor(self.writer_thread, self._write_now, work)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            with suppress(Exception):
                await done
            raise

    def _write_now(self, work: Callable[[Connection], T]) -> T:
        assert self.blocking_writer is not None
        try:
            with self.blocking_writer.connect() as connection:
                if not connection.info[_KEEPS_WAL]:
                    raise WriterBusy
                with connection.begin():
                    return work(connection)
        except DBAPIError as exc:
            if is_busy(exc):
                raise WriterBusy from exc
            failure = storage_failure(exc)
            if failure is None:
                raise
            raise failure from exc

    async def checkpoint(self) -> None:
        """Copy SQLite's write-ahead log into the database and truncate it (nothing to do on
        another database). A checkpoint that readers hold back is logged and left to the
        next one."""
        if self.engine.dialect.name != "sqlite":
            return
        async with self._write_lock, self.engine.connect() as connection:
            # The driver's own connection: SQLAlchemy would open a transaction around the
            # pragma, and a checkpoint cannot run inside one.
            driver = (await connection.get_raw_connection()).driver_connection
            assert driver is not None  # a connection just checked out of the pool
            await driver.execute(f"PRAGMA busy_timeout={_CHECKPOINT_BUSY_MS}")
            try:
                cursor = await driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                busy, log_pages, checkpointed = await cursor.fetchone()
            finally:
                await driver.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        if busy:
            log.info(
                "WAL checkpoint: %d of %d pages copied; readers held back the rest",
                checkpointed,
                log_pages,
            )

    async def journal_mode(self) -> str | None:
        """SQLite's journal mode: "wal" once set (it is asked for on every connection), or
        what SQLite kept where it cannot keep a write-ahead log (a file system without the
        shared memory it needs). None on another database."""
        if self.engine.dialect.name != "sqlite":
            return None
        async with self.engine.connect() as connection:
            mode = (await connection.exec_driver_sql("PRAGMA journal_mode")).scalar_one()
        return str(mode)

    async def dispose(self) -> None:
        try:
            await self.checkpoint()
        except Exception:  # a full disk, say: the log is checkpointed by the next start
            log.exception("the WAL checkpoint at shutdown failed")
        try:
            await self.engine.dispose()
        finally:
            if self.writer_thread is not None:
                self.writer_thread.shutdown()
            for blocking in (self.blocking_reader, self.quick_reader, self.blocking_writer):
                if blocking is not None:
                    blocking.dispose()


async def in_session(session: AsyncSession, work: Callable[[Connection], T]) -> T:
    """``work``, written for a blocking connection, on the session's (which runs each of its
    statements without blocking the event loop)."""
    return await session.run_sync(lambda sync_session: work(sync_session.connection()))


class WriterBusy(Exception):
    """A write that would not wait was not made: another process holds SQLite's write lock,
    or (no write-ahead log) the commit would wait for readers."""


def _configure_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        # Let SQLAlchemy emit BEGIN itself (the driver's implicit BEGIN is always deferred).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        (mode,) = cursor.fetchone()  # what SQLite kept
        record.info[_KEEPS_WAL] = mode == "wal"
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cursor.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(_BEGIN_OPTION, "")
        if mode != _NO_BEGIN:
            conn.exec_driver_sql(f"BEGIN {mode}")


def _free_interrupted_statement(cancelled: asyncio.CancelledError) -> None:
    """Drop the locals of the finished frames a cancellation passed through. On SQLite, a
    statement the cancellation interrupted is still referenced from them: the pool closes its
    connection, but SQLite only finishes closing it (and releases the write lock its
    transaction holds) once the statement is freed, which would otherwise wait for the
    garbage collector while every other writer times out on "database is locked".

    Only the cancellation's own frames (and those of cancellations it was raised from): on
    Python before 3.13 clearing a suspended coroutine's frame closes it, and an exception this
    one was raised while handling may have come from another task that is still running."""
    error: BaseException | None = cancelled
    while isinstance(error, asyncio.CancelledError):
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__


# What SQLite answers when another connection holds what a statement needs: a lock, or (after
# its own brief retries in WAL mode) the write-ahead log's index.
_HELD_ELSEWHERE = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL)


def is_busy(exc: BaseException) -> bool:
    """Whether SQLite refused a statement because another connection holds what it needs."""
    if not isinstance(exc, DBAPIError):
        return False
    code = getattr(exc.orig, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _HELD_ELSEWHERE


def _blocking_engine(url: str) -> Engine | None:
    """An engine on the same SQLite file through pysqlite (None for a database in memory,
    which another connection could not see)."""
    parsed = make_url(url)
    if parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory":
        return None
    # No cap on connections beyond the pool's five: the reads run in the service's I/O
    # threads, which bound them, or on the event loop, which must never wait on the pool.
    return create_engine(parsed.set(drivername="sqlite"), max_overflow=-1)


def _blocking_writer(url: str) -> Engine | None:
    """Writes to the SQLite file through pysqlite, each transaction begun IMMEDIATE with no
    busy wait."""
    engine = _blocking_engine(url)
    if engine is None:
        return None
    _configure_sqlite(engine, busy_timeout_ms=0)
    return engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})


def _blocking_reader(url: str, busy_timeout_ms: int) -> Engine | None:
    """A read-only engine on the same SQLite file through pysqlite."""
    engine = _blocking_engine(url)
    if engine is None:
        return None

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cursor.execute("PRAGMA query_only=ON")
        cursor.close()

    return engine


def open_database(url: str) -> Database:
    engine = create_async_engine(url, pool_pre_ping=not url.startswith("sqlite"))
    writer_engine = statements_engine = engine
    blocking_reader = quick_reader = blocking_writer = writer_thread = None
    if engine.dialect.name == "sqlite":
        blocking_reader = _blocking_reader(url, _BUSY_TIMEOUT_MS)
        quick_reader = _blocking_reader(url, 0)
        blocking_writer = _blocking_writer(url)
        if blocking_writer is not None:
            writer_thread = ThreadPoolExecutor(1, "sqlite-writer")
        _configure_sqlite(engine.sync_engine, _BUSY_TIMEOUT_MS)
        writer_engine = engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
        statements_engine = engine.execution_options(**{_BEGIN_OPTION: _NO_BEGIN})
    return Database(
        engine=engine,
        reader=async_sessionmaker(engine, expire_on_commit=False),
        writer=async_sessionmaker(writer_engine, expire_on_commit=False),
        statements=async_sessionmaker(statements_engine, expire_on_commit=False),
        blocking_reader=blocking_reader,
        quick_reader=quick_reader,
        blocking_writer=blocking_writer,
        writer_thread=writer_thread,
        serialize_writes=engine.dialect.name == "sqlite",
    )
