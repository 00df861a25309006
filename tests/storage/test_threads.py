"""File work under a task's lock ends before a cancellation lets the lock go: otherwise the
next holder writes the same files beside a thread that is still writing them."""

import asyncio
import threading
from pathlib import Path

import pytest

from app.storage.file_work import FileWork
from app.storage.layout import Layout
from app.storage.locks import FileLocks, TaskLocks
from app.storage.threads import finish_in_thread

TASK = "00000000-0000-4000-8000-000000000001"
WAIT_S = 5


class BlockedWork:
    """Blocking work that starts, then waits for the test to let it finish, and says when."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.events: list[str] = []

    def __call__(self) -> str:
        self.started.set()
        assert self.release.wait(WAIT_S)
        self.events.append("work ended")
        return "done"


async def test_it_answers_as_the_work_did() -> None:
    assert await finish_in_thread(sum, [1, 2, 3]) == 6

    def fails() -> None:
        raise OSError("the disk said no")

    with pytest.raises(OSError, match="the disk said no"):
        await finish_in_thread(fails)


@pytest.mark.parametrize("cancellations", [1, 3])
async def test_a_cancelled_holder_lets_its_lock_go_only_once_the_work_ended(
    cancellations: int,
) -> None:
    lock, work = asyncio.Lock(), BlockedWork()

    async def holder() -> None:
        async with lock:
            await finish_in_thread(work)

    held = asyncio.create_task(holder())
    assert await asyncio.to_thread(work.started.wait, WAIT_S)
    for _ in range(cancellations):  # a timeout, then a shutdown, say
        held.cancel()
        await asyncio.sleep(0.05)
    assert not held.done()
    assert lock.locked()

    work.release.set()
    with pytest.raises(asyncio.CancelledError):
        await held
    assert work.events == ["work ended"]
    assert not lock.locked()


async def test_an_appends_file_work_in_a_thread_keeps_the_task_lock_until_it_ended(
    tmp_path: Path,
) -> None:
    """The store's appends run their file work through FileWork: in a worker thread (here
    always), under the task's lock (in-process and the lock file). A second holder of the
    lock gets it only after the cancelled first one's work ended."""
    layout = Layout(tmp_path)
    layout.ensure()
    locks = TaskLocks(FileLocks(layout))
    file_work = FileWork(0.0, "appends' file work")
    work = BlockedWork()

    async def first() -> None:
        async with locks.hold(TASK):
            await file_work.run(work, may_block_loop=False)

    async def second() -> None:
        async with locks.hold(TASK):
            work.events.append("second holder in")

    held = asyncio.create_task(first())
    assert await asyncio.to_thread(work.started.wait, WAIT_S)
    waiting = asyncio.create_task(second())
    held.cancel()
    await asyncio.sleep(0.1)
    assert work.events == []
    assert not waiting.done()

    work.release.set()
    with pytest.raises(asyncio.CancelledError):
        await held
    await asyncio.wait_for(waiting, WAIT_S)
    assert work.events == ["work ended", "second holder in"]
    await locks.close()


def test_a_shutdown_lets_the_lock_go_only_once_the_work_ended() -> None:
    """``asyncio.run`` ending cancels every task left, and waits for them: the holder's
    cancellation waits for its thread's work as any other does."""
    work = BlockedWork()

    def finish_later() -> None:
        assert work.started.wait(WAIT_S)
        threading.Timer(0.2, work.release.set).start()

    async def holder(lock: asyncio.Lock) -> None:
        try:
            async with lock:
                await finish_in_thread(work)
        finally:
            work.events.append("lock let go")

    async def serve_then_stop() -> None:
        asyncio.create_task(holder(asyncio.Lock()))  # noqa: RUF006 (left to the shutdown)
        await asyncio.to_thread(finish_later)

    asyncio.run(serve_then_stop())
    assert work.events == ["work ended", "lock let go"]
