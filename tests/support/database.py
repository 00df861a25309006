"""The test's database, reached from outside the app (as an operator or a crash would).

DATABASE_URL names the test's own PostgreSQL database (tests/conftest.py); without it, the app
keeps SQLite in its context directory. Statements run on a private event loop in a worker
thread, so that sync and async tests alike can call :func:`run_sql`.
"""

import asyncio
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event, make_url, text
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

T = TypeVar("T")


def in_thread(work: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine function to completion on a new event loop in another thread."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(asyncio.run(work()))  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]


def uses_postgres() -> bool:
    return bool(os.environ.get("DATABASE_URL"))


def run_sql(context_dir: Path, *statements: tuple[str, dict[str, Any]]) -> list[Any]:
    """Run the statements in one transaction; for each, its rows (a query) or its row count."""
    url = os.environ.get("DATABASE_URL") or f"sqlite+aiosqlite:///{context_dir / 'tasks.db'}"

    async def work() -> list[Any]:
        engine = create_async_engine(url, poolclass=NullPool)
        try:
            async with engine.begin() as connection:
                results: list[Any] = []
                for sql, params in statements:
                    result = await connection.execute(text(sql), params)
                    results.append(result.all() if result.returns_rows else result.rowcount)
                return results
        finally:
            await engine.dispose()

    return in_thread(work)


@asynccontextmanager
async def sqlite_write_lock_held(url: str) -> AsyncIterator[None]:
    """SQLite's write lock (``BEGIN IMMEDIATE``) held by a connection of its own, as another
    process would hold it, from before the block runs until it ends."""
    loop = asyncio.get_running_loop()
    holding, release = asyncio.Event(), threading.Event()

    def hold() -> None:
        other = sqlite3.connect(make_url(url).database or "", isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            loop.call_soon_threadsafe(holding.set)
            release.wait(timeout=60)
            other.execute("COMMIT")
        finally:
            other.close()

    holder = asyncio.create_task(asyncio.to_thread(hold))
    waiting = asyncio.create_task(holding.wait())
    await asyncio.wait([holder, waiting], return_when=asyncio.FIRST_COMPLETED)
    if not holding.is_set():  # the lock was never taken: its error
        waiting.cancel()
        await holder
    try:
        yield
    finally:
        release.set()
        await holder


def statements_of(*engines: Engine) -> list[list[str]]:
    """The statements each engine runs from now on (its cursor's, BEGIN included)."""
    seen: list[list[str]] = []
    for engine in engines:
        ran: list[str] = []

        @event.listens_for(engine, "before_cursor_execute")
        def record(_c: Any, _cur: Any, statement: str, *_: Any, ran: list[str] = ran) -> None:
            ran.append(statement.split(None, 1)[0].upper())

        seen.append(ran)
    return seen
