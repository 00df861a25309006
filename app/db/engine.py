"""Engine and session factories.

On SQLite, writers open their transactions with BEGIN IMMEDIATE: a deferred transaction that
reads and then writes can fail at once with SQLITE_BUSY when another process wrote in between,
whereas IMMEDIATE waits for the lock (busy_timeout) and then succeeds. Within one process,
write transactions also queue on an asyncio lock: SQLite takes one writer at a time anyway, and
its busy handler waits by sleeping (up to 100 ms a turn), which an asyncio queue avoids.
"""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

_BEGIN_OPTION = "sqlite_begin"


@dataclass(frozen=True)
class Database:
    engine: AsyncEngine
    reader: async_sessionmaker[AsyncSession]
    writer: async_sessionmaker[AsyncSession]
    serialize_writes: bool
    _write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A write transaction, committed when the block ends without an exception."""
        async with (
            self._write_lock if self.serialize_writes else nullcontext(),
            self.writer() as session,
            session.begin(),
        ):
            yield session

    async def dispose(self) -> None:
        await self.engine.dispose()


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy emit BEGIN itself (the driver's implicit BEGIN is always deferred).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(f"BEGIN {conn.get_execution_options().get(_BEGIN_OPTION, '')}")


def open_database(url: str) -> Database:
    engine = create_async_engine(url, pool_pre_ping=not url.startswith("sqlite"))
    writer_engine = engine
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine)
        writer_engine = engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
    return Database(
        engine=engine,
        reader=async_sessionmaker(engine, expire_on_commit=False),
        writer=async_sessionmaker(writer_engine, expire_on_commit=False),
        serialize_writes=engine.dialect.name == "sqlite",
    )
