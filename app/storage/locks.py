"""Per-task mutual exclusion, within this process and across processes on one machine.

An asyncio lock orders this process's coroutines; an ``fcntl.flock`` on a lock file orders the
processes. The flock is taken without blocking and retried with short sleeps, so waiting never
ties up a worker thread or the event loop.
"""

import asyncio
import fcntl
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from app.storage.layout import Layout

_MAX_BACKOFF_S = 0.005


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class TaskLocks:
    def __init__(self, layout: Layout) -> None:
        self._layout = layout
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
            async with entry.lock:
                path = self._layout.lock_path(task_uuid)
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
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[task_uuid]


async def flock(path: Path, *, create: bool = True) -> int:
    """Open ``path`` (made if missing, with ``create``) and take an exclusive flock on it;
    returns the descriptor holding it."""
    fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    delay = 0.0002
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_BACKOFF_S)
    except BaseException:
        os.close(fd)
        raise
