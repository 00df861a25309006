"""The database on SQLite: the statements session (no BEGIN: each statement its own
transaction) and the blocking reader (pysqlite, read-only) see what the writer committed, the
blocking reader can write nothing, the quick reader (the event loop's) waits for no lock, the
blocking writer commits a whole transaction in one call and waits for no other writer, a
cancelled transaction leaves no write lock behind, and the journal mode is the write-ahead log
wherever SQLite can keep one."""

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from app.db.engine import Database, WriterBusy, is_busy, open_database
from app.errors import InsufficientStorage, StorageUnavailable
from tests.support.database import sqlite_write_lock_held


@asynccontextmanager
async def notes_database(tmp_path: Path, *, query: str = "") -> AsyncIterator[Database]:
    """A SQLite database with an empty table ``notes (body)``; ``query``: the URL's, with
    which the path is a URI."""
    path = tmp_path / "tasks.db"
    db = open_database(
        f"sqlite+aiosqlite:///file:{path}?{query}&uri=true"
        if query
        else f"sqlite+aiosqlite:///{path}"
    )
    try:
        async with db.transaction() as session:
            await session.execute(text("CREATE TABLE notes (body TEXT)"))
        yield db
    finally:
        await db.dispose()


async def test_every_way_in_sees_the_writers_commits_and_the_blocking_reader_writes_nothing(
    tmp_path: Path,
) -> None:
    async with notes_database(tmp_path) as db:
        async with db.transaction() as session:
            await session.execute(text("INSERT INTO notes VALUES ('first')"))
        async with db.statements() as session:
            assert (await session.execute(text("SELECT body FROM notes"))).scalars().all() == [
                "first"
            ]
        reader = db.blocking_reader
        assert reader is not None

        def read() -> list[str]:
            with reader.connect() as connection:
                return list(connection.execute(text("SELECT body FROM notes")).scalars())

        def write() -> None:
            with reader.connect() as connection:
                connection.execute(text("INSERT INTO notes VALUES ('never')"))
                connection.commit()

        assert await asyncio.to_thread(read) == ["first"]
        async with db.transaction() as session:
            await session.execute(text("INSERT INTO notes VALUES ('second')"))
        assert await asyncio.to_thread(read) == ["first", "second"]
        with pytest.raises(OperationalError, match="readonly"):
            await asyncio.to_thread(write)
        assert await asyncio.to_thread(read) == ["first", "second"]


async def test_the_quick_reader_fails_at_once_while_another_connection_holds_the_lock(
    tmp_path: Path,
) -> None:
    """In exclusive locking mode a writer keeps even WAL readers out: the event loop's reader
    is refused at once, recognisably, where the worker threads' would wait (busy_timeout)."""
    async with notes_database(tmp_path) as db:
        await db.engine.dispose()  # the service's own connections closed: only the holder's
        holder = sqlite3.connect(tmp_path / "tasks.db")
        try:
            holder.execute("PRAGMA locking_mode=EXCLUSIVE")
            holder.execute("BEGIN EXCLUSIVE")
            holder.execute("INSERT INTO notes VALUES ('held')")
            quick = db.quick_reader
            assert quick is not None
            started = time.monotonic()
            with pytest.raises(OperationalError) as refused, quick.connect() as connection:
                connection.execute(text("SELECT body FROM notes"))
            assert time.monotonic() - started < 1
            assert is_busy(refused.value)
        finally:
            holder.rollback()
            holder.close()
        with quick.connect() as connection:  # the lock given back: read as usual
            assert list(connection.execute(text("SELECT body FROM notes")).scalars()) == []


async def test_the_blocking_writer_commits_all_or_nothing_and_refuses_at_once_when_busy(
    tmp_path: Path,
) -> None:
    async with notes_database(tmp_path) as db:

        def insert(body: str, *, then_fail: bool = False) -> Callable[[Connection], int]:
            def work(connection: Connection) -> int:
                connection.execute(text("INSERT INTO notes VALUES (:body)"), {"body": body})
                if then_fail:
                    raise RuntimeError("after the insert")
                return 1

            return work

        async def notes() -> list[str]:
            async with db.statements() as session:
                return list((await session.execute(text("SELECT body FROM notes"))).scalars())

        assert await db.write_at_once(insert("first")) == 1
        with pytest.raises(RuntimeError, match="after the insert"):
            await db.write_at_once(insert("undone", then_fail=True))
        assert await notes() == ["first"]
        async with sqlite_write_lock_held(str(db.engine.url)):
            started = time.monotonic()
            with pytest.raises(WriterBusy):
                await db.write_at_once(insert("refused"))
            assert time.monotonic() - started < 1
        assert await notes() == ["first"]
        assert await db.write_at_once(insert("second")) == 1
        assert await notes() == ["first", "second"]


async def test_without_a_write_ahead_log_the_blocking_writer_refuses_at_once(
    tmp_path: Path,
) -> None:
    """Its commit would wait for every reader there: nothing written, the caller writes the
    usual way."""
    async with notes_database(tmp_path, query="vfs=unix-none") as db:
        assert await db.journal_mode() == "delete"

        def insert(connection: Connection) -> int:
            connection.execute(text("INSERT INTO notes VALUES ('refused')"))
            return 1

        with pytest.raises(WriterBusy):
            await db.write_at_once(insert)
        async with db.statements() as session:
            assert (await session.execute(text("SELECT body FROM notes"))).all() == []


async def test_the_blocking_writer_says_a_full_or_unwritable_database_as_the_store_does(
    tmp_path: Path,
) -> None:
    """The same domain errors as the other writes: nothing written, and the next write works."""
    async with notes_database(tmp_path) as db:

        def over_the_size_cap(connection: Connection) -> None:
            # A database at its size cap: SQLite answers SQLITE_FULL, as on a full disk.
            pages = connection.exec_driver_sql("PRAGMA page_count").scalar_one()
            connection.exec_driver_sql(f"PRAGMA max_page_count = {pages}")
            connection.execute(text("INSERT INTO notes VALUES (:body)"), {"body": "x" * 100_000})

        def read_only(connection: Connection) -> None:
            connection.exec_driver_sql("PRAGMA query_only = ON")
            try:
                connection.execute(text("INSERT INTO notes VALUES ('refused')"))
            finally:
                connection.exec_driver_sql("PRAGMA query_only = OFF")

        with pytest.raises(InsufficientStorage):
            await db.write_at_once(over_the_size_cap)
        with pytest.raises(StorageUnavailable):
            await db.write_at_once(read_only)

        def insert(connection: Connection) -> None:
            connection.exec_driver_sql("PRAGMA max_page_count = 1073741823")
            connection.execute(text("INSERT INTO notes VALUES ('written')"))

        await db.write_at_once(insert)
        async with db.statements() as session:
            rows = (await session.execute(text("SELECT body FROM notes"))).scalars()
            assert list(rows) == ["written"]


async def test_the_blocking_writer_has_a_thread_of_its_own_and_outlives_a_cancel(
    tmp_path: Path,
) -> None:
    """Its caller holds locks: it neither queues behind the I/O threads' other work (it runs
    in the database's own thread), nor, cancelled, returns before its transaction ended."""
    async with notes_database(tmp_path) as db:
        threads: list[str] = []

        def insert(body: str, wait_for: threading.Event | None = None) -> Callable[..., int]:
            def work(connection: Connection) -> int:
                threads.append(threading.current_thread().name)
                connection.execute(text("INSERT INTO notes VALUES (:body)"), {"body": body})
                if wait_for is not None:
                    assert wait_for.wait(10)
                return 1

            return work

        assert await db.write_at_once(insert("first")) == 1
        release = threading.Event()
        writing = asyncio.create_task(db.write_at_once(insert("cancelled", release)))
        await asyncio.sleep(0.05)
        writing.cancel()
        await asyncio.sleep(0.05)
        assert not writing.done()  # its transaction still open in the thread
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await writing
        async with db.statements() as session:
            rows = (await session.execute(text("SELECT body FROM notes"))).scalars()
            assert list(rows) == ["first", "cancelled"]
        assert len(set(threads)) == 1
        assert threads[0].startswith("sqlite-writer")


def test_only_a_lock_held_elsewhere_is_busy() -> None:
    assert not is_busy(ValueError("database is locked"))
    missing = OperationalError("SELECT", {}, sqlite3.OperationalError("no such table: notes"))
    assert not is_busy(missing)


async def test_a_database_in_memory_has_no_blocking_reader() -> None:
    db = open_database("sqlite+aiosqlite:///:memory:")
    try:
        assert db.blocking_reader is None
        assert db.quick_reader is None
        assert db.blocking_writer is None
    finally:
        await db.dispose()


async def test_a_transaction_cancelled_mid_statement_leaves_no_write_lock(tmp_path: Path) -> None:
    """A task cancelled while its transaction's statement runs (a job stopped at shutdown):
    the next write transaction gets the lock as soon as that statement ends, not after the
    busy timeout (30 s) with "database is locked"."""
    db = open_database(f"sqlite+aiosqlite:///{tmp_path / 'tasks.db'}")
    try:
        async with db.transaction() as session:
            await session.execute(text("CREATE TABLE notes (body TEXT)"))
        slow = (
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000) "
            "SELECT count(*) FROM n"
        )

        async def interrupted() -> None:
            async with db.transaction() as session:
                await session.execute(text("INSERT INTO notes VALUES ('lost')"))
                await session.execute(text(slow))

        task = asyncio.create_task(interrupted())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        started = time.monotonic()
        async with db.transaction() as session:
            await session.execute(text("INSERT INTO notes VALUES ('kept')"))
        assert time.monotonic() - started < 10
        async with db.statements() as session:
            assert (await session.execute(text("SELECT body FROM notes"))).scalars().all() == [
                "kept"
            ]
    finally:
        await db.dispose()


async def test_the_journal_mode_is_the_write_ahead_log_or_what_sqlite_kept(
    tmp_path: Path,
) -> None:
    """WAL on a file; where SQLite cannot keep one (here a file system without locks or shared
    memory, as SQLite's unix-none VFS pretends) it keeps its rollback journal, and says so."""
    urls = {
        "wal": f"sqlite+aiosqlite:///{tmp_path / 'wal.db'}",
        "delete": f"sqlite+aiosqlite:///file:{tmp_path / 'plain.db'}?vfs=unix-none&uri=true",
        "memory": "sqlite+aiosqlite:///:memory:",
    }
    for expected, url in urls.items():
        db = open_database(url)
        try:
            assert await db.journal_mode() == expected, url
        finally:
            await db.dispose()
