"""A write the disk refuses becomes the same domain error whoever refused it: the files (errno),
SQLite (SQLITE_FULL) or PostgreSQL (SQLSTATE 53100 disk_full); other failures stay what they
are."""

import errno
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_dbapi
from sqlalchemy.exc import OperationalError

from app.db.engine import Database, open_database
from app.errors import InsufficientStorage, StorageUnavailable
from app.storage.failures import storage_failure


async def test_sqlite_full_leaves_a_transaction_as_insufficient_storage(tmp_path: Path) -> None:
    """A real SQLITE_FULL, from a database that may not grow."""
    db = open_database(f"sqlite+aiosqlite:///{tmp_path / 'small.db'}")
    try:
        async with db.transaction() as session:
            await session.execute(text("CREATE TABLE blobs (data BLOB)"))
        with pytest.raises(InsufficientStorage) as refused:
            await fill(db)
        assert refused.value.status_code == 507
        assert refused.value.code == "insufficient_storage"
        assert refused.value.details == {"reason": "the database's disk is full"}
        async with db.reader() as session:  # nothing of the refused transaction was kept
            assert (await session.execute(text("SELECT count(*) FROM blobs"))).scalar() == 0
    finally:
        await db.dispose()


async def fill(db: Database) -> None:
    """Write more than the database may hold: it may not grow past 8 pages (max_page_count)."""
    async with db.transaction() as session:
        await session.execute(text("PRAGMA max_page_count = 8"))
        for _ in range(20):
            await session.execute(text("INSERT INTO blobs VALUES (zeroblob(4000))"))


def _postgres_error(error: asyncpg.PostgresError) -> OperationalError:
    """``error`` as SQLAlchemy's asyncpg dialect hands it on."""
    adapted = AsyncAdapt_asyncpg_dbapi.Error(str(error), error)  # type: ignore[no-untyped-call]
    return OperationalError("INSERT INTO tasks ...", {}, adapted)


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), InsufficientStorage),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), InsufficientStorage),
        (OSError(errno.EROFS, "Read-only file system"), StorageUnavailable),
        (OSError(errno.EACCES, "Permission denied"), StorageUnavailable),
        (
            _postgres_error(asyncpg.exceptions.DiskFullError("could not extend file")),
            InsufficientStorage,
        ),
        (
            _postgres_error(asyncpg.exceptions.ReadOnlySQLTransactionError("read-only")),
            StorageUnavailable,
        ),
    ],
)
def test_refusals_of_the_disk_become_domain_errors(
    failure: BaseException, expected: type[Exception]
) -> None:
    error = storage_failure(failure)
    assert type(error) is expected
    assert error is not None
    assert "nothing was acknowledged" in error.message


@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.EIO, "Input/output error"),
        FileNotFoundError(errno.ENOENT, "No such file or directory"),
        _postgres_error(asyncpg.exceptions.UniqueViolationError("duplicate key")),
        ValueError("not a storage failure"),
    ],
)
def test_other_failures_are_not_storage_refusals(failure: BaseException) -> None:
    assert storage_failure(failure) is None
