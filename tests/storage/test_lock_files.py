"""Lock files go with their tasks, and removing one never breaks mutual exclusion.

A delete removes ``.locks/{uuid}.lock`` while holding it. Whoever was already waiting on that
file (another process, or another app on the same CONTEXT_DIR here: flock excludes open files,
not processes) must not take the lock of a file no longer at the path: it locks the path afresh,
and is refused there like any unknown task.
"""

import asyncio
import time
import uuid as uuid_module
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.storage.layout import Layout
from app.storage.locks import FileLocks, TaskLocks
from tests.support.app import running_app
from tests.support.database import uses_postgres
from tests.support.errors import assert_error
from tests.support.files import paths_naming
from tests.support.records import post_json
from tests.support.tasks import task_body

TASK = str(uuid_module.uuid4())
WAITER_SETTLES_S = 0.05  # long enough for a waiter to have opened the file and be polling


class Refused(Exception):
    pass


async def _refuse() -> None:
    raise Refused


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    layout = Layout(tmp_path / "contexts")
    layout.ensure()
    return layout


def _process(layout: Layout) -> TaskLocks:
    """Locks as one process holds them (flock excludes each open file from the others)."""
    return TaskLocks(FileLocks(layout))


async def test_a_waiter_on_a_removed_lock_file_is_refused_like_an_unknown_task(
    layout: Layout,
) -> None:
    holder, waiter = _process(layout), _process(layout)
    entered = asyncio.Event()

    async def wait() -> None:
        async with waiter.hold(TASK, before_creating=_refuse):
            entered.set()

    async with holder.hold(TASK):
        waiting = asyncio.create_task(wait())
        await asyncio.sleep(WAITER_SETTLES_S)
        holder.discard(TASK)
    with pytest.raises(Refused):
        await waiting
    assert not entered.is_set()
    assert not layout.lock_path(TASK).exists()


async def test_a_waiter_on_a_removed_lock_file_excludes_the_next_holder(layout: Layout) -> None:
    """The file is removed and a new task of the uuid locks a new file at the path before the
    old holder lets go: the waiter on the old file waits for the new holder."""
    holder, waiter, creator = _process(layout), _process(layout), _process(layout)
    spans: dict[str, tuple[float, float]] = {}

    async def take(name: str, locks: TaskLocks, hold_s: float) -> None:
        async with locks.hold(TASK):
            start = time.monotonic()
            await asyncio.sleep(hold_s)
            spans[name] = (start, time.monotonic())

    async with holder.hold(TASK):
        waiting = asyncio.create_task(take("waiter", waiter, 0.0))
        await asyncio.sleep(WAITER_SETTLES_S)
        holder.discard(TASK)
        creating = asyncio.create_task(take("creator", creator, 0.2))
        await asyncio.sleep(WAITER_SETTLES_S)  # the creator holds the new file
    await asyncio.gather(waiting, creating)
    assert spans["waiter"][0] >= spans["creator"][1], spans


async def test_delete_removes_the_lock_file_and_concurrent_requests_get_404(
    settings: Settings, context_dir: Path
) -> None:
    """Two apps on one CONTEXT_DIR: one deletes tasks while the other appends to and reads
    them; every answer is a success or a clean 404 task_not_found (never a 500), and once
    deleted, nothing of a task is left: no directory, no lock file."""
    async with running_app(settings) as deleter, running_app(settings) as other:
        uuids = []
        for _ in range(6):
            created = await post_json(deleter, "/tasks", task_body(system_prompt="Agent."))
            uuids.append(created["uuid"])
        kept = (await post_json(deleter, "/tasks", task_body()))["uuid"]
        answers: list[httpx.Response] = []

        async def use(uuid: str) -> None:
            for n in range(200):
                if n % 2:
                    response = await other.get(f"/tasks/{uuid}/request")
                else:
                    message = {"role": "user", "content": f"message {n}"}
                    response = await other.post(f"/tasks/{uuid}/messages", json=message)
                answers.append(response)
                if response.status_code == 404:
                    return
            pytest.fail(f"task {uuid} was never deleted")

        async def delete(uuid: str) -> None:
            await asyncio.sleep(0.01)
            response = await deleter.delete(f"/tasks/{uuid}")
            assert response.status_code == 204, response.text

        await asyncio.gather(*(use(u) for u in uuids), *(delete(u) for u in uuids))
        for response in answers:
            if response.status_code == 404:
                assert_error(response, 404, "task_not_found")
            else:
                assert response.status_code in (200, 201), response.text
        for uuid in uuids:
            assert paths_naming(context_dir, uuid) == []
            assert_error(await other.get(f"/tasks/{uuid}/request"), 404, "task_not_found")
            assert paths_naming(context_dir, uuid) == []  # a refused lookup makes no file
        locks = sorted(p.name for p in (context_dir / ".locks").iterdir())
        # PostgreSQL's advisory locks make no files.
        assert locks == ([] if uses_postgres() else sorted([f"{kept}.lock", "startup.lock"]))
