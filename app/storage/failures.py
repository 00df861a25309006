"""Which failed writes mean "the disk is full" or "the store cannot be written", whether the
files or the database reported them: both become the same domain errors, whatever the backend.
"""

import errno
import os
import sqlite3

from sqlalchemy.exc import DBAPIError

from app.errors import InsufficientStorage, StorageError, StorageUnavailable

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_UNWRITABLE_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}
# SQLite's primary result codes (the low byte of an extended one).
_SQLITE_UNWRITABLE = {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN}
# PostgreSQL's SQLSTATEs: disk_full, read_only_sql_transaction.
_PG_DISK_FULL = "53100"
_PG_READ_ONLY = "25006"


def storage_failure(exc: BaseException) -> StorageError | None:
    """The domain error for a write that failed because the disk is full
    (:class:`InsufficientStorage`) or cannot be written (:class:`StorageUnavailable`); None for
    any other failure. The message names no path: paths stay on the server."""
    full, reason = _classify(exc)
    if reason is None:
        return None
    message = f"the context store cannot be written: {reason}; nothing was acknowledged"
    error = InsufficientStorage if full else StorageUnavailable
    return error(message, details={"reason": reason})


def _classify(exc: BaseException) -> tuple[bool, str | None]:
    if isinstance(exc, OSError):
        if exc.errno in _FULL_ERRNOS or exc.errno in _UNWRITABLE_ERRNOS:
            return exc.errno in _FULL_ERRNOS, os.strerror(exc.errno or 0)
        return False, None
    cause = exc.orig if isinstance(exc, DBAPIError) else exc
    sqlite_code = getattr(cause, "sqlite_errorcode", None)
    if isinstance(cause, sqlite3.Error) and sqlite_code is not None:
        primary = sqlite_code & 0xFF
        if primary == sqlite3.SQLITE_FULL:
            return True, "the database's disk is full"
        if primary in _SQLITE_UNWRITABLE:
            return False, "the database cannot be written"
        return False, None
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate == _PG_DISK_FULL:
        return True, "the database's disk is full"
    if sqlstate == _PG_READ_ONLY:
        return False, "the database cannot be written"
    return False, None
