"""TaskLocks: one holder per task uuid, among coroutines and among processes, with both kinds
of process locks: lock files (SQLite) and PostgreSQL advisory locks (when the suite runs on
PostgreSQL; skipped on SQLite)."""

import asyncio
import fcntl
import os
import subprocess
import sys
import textwrap
import uuid as uuid_module
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from app.storage.layout import Layout
from app.storage.locks import AdvisoryLocks, FileLocks, TaskLocks, advisory_key
from tests.support.paths import REPO

TASK = str(uuid_module.uuid4())


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    layout = Layout(tmp_path / "contexts")
    layout.ensure()
    return layout


@pytest.fixture(params=["files", "advisory"])
def lock_url(request: pytest.FixtureRequest, database_url: str) -> str:
    """ "" for lock files; the test database's URL for advisory locks."""
    if request.param == "files":
        return ""
    if not database_url.startswith("postgresql"):
        pytest.skip("advisory locks need PostgreSQL (make test-postgres)")
    return database_url


@pytest.fixture
async def make_locks(layout: Layout, lock_url: str) -> AsyncIterator[Callable[[], TaskLocks]]:
    """New TaskLocks of the kind under test; each set stands for a process of its own."""
    engine = create_async_engine(lock_url) if lock_url else None
    made: list[TaskLocks] = []

    def make() -> TaskLocks:
        made.append(TaskLocks(AdvisoryLocks(engine) if engine else FileLocks(layout)))
        return made[-1]

    yield make
    for locks in made:
        await locks.close()
    if engine is not None:
        await engine.dispose()


@asynccontextmanager
async def held_elsewhere(layout: Layout, lock_url: str) -> AsyncIterator[None]:
    """TASK's process lock, held outside TaskLocks (as another process would)."""
    if not lock_url:
        fd = os.open(layout.lock_path(TASK), os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            os.close(fd)
        return
    dsn = make_url(lock_url).set(drivername="postgresql").render_as_string(hide_password=False)
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute("SELECT pg_advisory_lock($1)", advisory_key(TASK))
        yield
    finally:
        await connection.close()


async def test_mutual_exclusion_between_coroutines(make_locks: Callable[[], TaskLocks]) -> None:
    """Many coroutines doing read-await-write on a shared counter under the lock never lose an
    update and are never two inside at once; afterwards no lock entry is left."""
    locks = make_locks()
    counter = 0
    inside = 0
    most_inside = 0

    async def bump(i: int) -> None:
        nonlocal counter, inside, most_inside
        async with locks.hold(TASK):
            inside += 1
            most_inside = max(most_inside, inside)
            value = counter
            await asyncio.sleep(0 if i % 2 else 0.001)
            counter = value + 1
            inside -= 1

    await asyncio.wait_for(asyncio.gather(*(bump(i) for i in range(60))), timeout=60)
    assert counter == 60
    assert most_inside == 1
    assert locks._entries == {}


async def test_trying_a_lock_a_coroutine_waits_for_fails_at_once(
    make_locks: Callable[[], TaskLocks],
) -> None:
    """Released to a waiter that has not run yet, the lock is free, but taking it would wait
    for that waiter: a try must not (a write-behind round tries task locks while holding the
    database's write lock, which the waiter may need next)."""
    locks = make_locks()

    async def wait_and_hold() -> None:
        async with locks.hold(TASK):
            await asyncio.sleep(0.3)

    async with locks.hold(TASK):
        waiter = asyncio.create_task(wait_and_hold())
        await asyncio.sleep(0.05)  # the waiter waits for the lock
    async with locks.try_hold(TASK) as held:  # released; the waiter has not run yet
        assert not held
    await waiter
    async with locks.try_hold(TASK) as held:
        assert held


async def test_trying_each_holds_the_free_locks_and_lets_the_others_go(
    make_locks: Callable[[], TaskLocks],
) -> None:
    here, other = make_locks(), make_locks()  # two processes
    free, taken = TASK, str(uuid_module.uuid4())
    for task in (free, taken):
        async with here.hold(task):  # the lock files exist
            pass
    async with other.hold(taken), here.try_hold_each([free, taken]) as held:
        assert held == {free}
        assert here.in_use(free)
        assert not here.in_use(taken)  # the failed try holds nothing meanwhile
    assert not here.in_use(free)


async def test_different_tasks_do_not_block_each_other(make_locks: Callable[[], TaskLocks]) -> None:
    """Holding one task's lock does not delay another task's."""
    locks = make_locks()
    other = str(uuid_module.uuid4())
    async with locks.hold(TASK):
        # Would time out (not hang) if the two uuids shared a lock.
        await asyncio.wait_for(_in_other(locks, other, {TASK, other}), timeout=30)
    assert locks._entries == {}


async def _in_other(locks: TaskLocks, task_uuid: str, expected: set[str]) -> None:
    async with locks.hold(task_uuid):
        assert set(locks._entries) == expected


async def test_lock_released_on_error_and_on_cancelled_waiter(
    make_locks: Callable[[], TaskLocks],
) -> None:
    """An exception inside the critical section releases the lock; a waiter cancelled while
    queued leaves no entry behind and does not block the next holder."""
    locks = make_locks()
    with pytest.raises(RuntimeError):
        async with locks.hold(TASK):
            raise RuntimeError("inside")
    assert locks._entries == {}

    held = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.hold(TASK):
            held.set()
            await release.wait()

    async def waiter() -> None:
        async with locks.hold(TASK):
            pytest.fail("the cancelled waiter must never get the lock")

    holding = asyncio.create_task(holder())
    await held.wait()
    waiting = asyncio.create_task(waiter())
    for _ in range(5):
        await asyncio.sleep(0)
    assert locks._entries[TASK].users == 2
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert locks._entries[TASK].users == 1
    release.set()
    await holding
    assert locks._entries == {}
    async with locks.hold(TASK):  # still usable
        pass
    assert locks._entries == {}


async def test_waiting_on_another_process_does_not_block_the_loop(
    layout: Layout, lock_url: str, make_locks: Callable[[], TaskLocks]
) -> None:
    """While another process holds the lock, a waiter sleeps on the event loop (other
    coroutines keep running) and can be cancelled without leaking its entry."""
    locks = make_locks()
    async with held_elsewhere(layout, lock_url):
        waiting = asyncio.create_task(_hold_briefly(locks))
        ticks = 0
        for _ in range(20):
            await asyncio.sleep(0.001)
            ticks += 1
        assert ticks == 20
        assert not waiting.done()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert locks._entries == {}
    await asyncio.wait_for(_hold_briefly(locks), timeout=30)  # free again
    assert locks._entries == {}


async def _hold_briefly(locks: TaskLocks) -> None:
    async with locks.hold(TASK):
        await asyncio.sleep(0)


# -- across processes ---------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from pathlib import Path
    from sqlalchemy.ext.asyncio import create_async_engine
    from app.storage.layout import Layout
    from app.storage.locks import AdvisoryLocks, FileLocks, TaskLocks

    root, task, log, go, rounds, url = sys.argv[1:7]

    def write(text):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, text.encode())
        os.close(fd)

    async def main():
        engine = create_async_engine(url) if url else None
        locks = TaskLocks(AdvisoryLocks(engine) if engine else FileLocks(Layout(Path(root))))
        while not os.path.exists(go):
            await asyncio.sleep(0.005)
        for i in range(int(rounds)):
            async with locks.hold(task):
                write(f"start {os.getpid()} {i}\\n")
                await asyncio.sleep(0.01)
                write(f"end {os.getpid()} {i}\\n")
            await asyncio.sleep(0)
        assert not locks._entries
        await locks.close()

    asyncio.run(main())
    """
)


def _spawn(
    layout: Layout, lock_url: str, log: Path, go: Path, rounds: int
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [str(layout.root), TASK, str(log), str(go), str(rounds), lock_url]
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, *args], env=env, cwd=REPO, stderr=subprocess.PIPE
    )


def _wait_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr.decode()


async def test_mutual_exclusion_between_processes(
    layout: Layout, lock_url: str, tmp_path: Path
) -> None:
    """Three processes each take the same task's lock repeatedly and write a start and an end
    line with a sleep in between: the log never interleaves two holders."""
    log, go, rounds = tmp_path / "log.txt", tmp_path / "go", 8
    processes = [_spawn(layout, lock_url, log, go, rounds) for _ in range(3)]
    go.touch()  # all start together
    await asyncio.to_thread(_wait_all, processes)

    lines = log.read_text().splitlines()
    assert len(lines) == 2 * rounds * len(processes)
    for start, end in zip(lines[::2], lines[1::2], strict=True):
        kind, pid, i = start.split()
        assert kind == "start"
        assert end == f"end {pid} {i}", lines
    pids = {line.split()[1] for line in lines}
    assert pids == {str(p.pid) for p in processes}


async def test_process_waits_while_this_process_holds(
    layout: Layout, lock_url: str, tmp_path: Path, make_locks: Callable[[], TaskLocks]
) -> None:
    """A process cannot get the lock while a coroutine here holds it; it gets it once the
    holder lets go."""
    log, go = tmp_path / "log.txt", tmp_path / "go"
    locks = make_locks()
    async with locks.hold(TASK):
        process = _spawn(layout, lock_url, log, go, 1)
        go.touch()
        await asyncio.sleep(0.3)  # the worker is free to try for a while
        assert not log.exists() or log.read_text() == ""
    await asyncio.to_thread(_wait_all, [process])
    assert log.read_text().split("\n")[0].startswith("start")
    assert locks._entries == {}


async def test_a_lost_advisory_connection_is_replaced(
    lock_url: str, make_locks: Callable[[], TaskLocks], caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends the lock connection (a restart, an admin's pg_terminate_backend): the
    next lock opens a new connection, and holds the lock there, instead of failing; the loss
    is logged."""
    if not lock_url:
        pytest.skip("lock files have no connection")
    locks = make_locks()
    async with locks.hold(TASK):
        pass
    dsn = make_url(lock_url).set(drivername="postgresql").render_as_string(hide_password=False)
    admin = await asyncpg.connect(dsn)
    try:
        ended = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        assert ended == 1
        async with locks.hold(TASK):
            assert (
                await admin.fetchval("SELECT pg_try_advisory_lock($1)", advisory_key(TASK)) is False
            )
    finally:
        await admin.close()
    assert "advisory lock connection was lost" in caplog.text
