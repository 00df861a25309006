"""An append close after another takes this process's copy of the task's row, and the call
that writes the files first checks that they are still the size of its head. Two apps on one
CONTEXT_DIR and database share what two processes share (no memory): each must notice the
other's appends and its pause, whatever its own copy says."""

from pathlib import Path

import pytest

from app.config import Settings
from tests.support.app import running_app
from tests.support.errors import assert_error
from tests.support.files import locations, read_jsonl, snapshot_dir, task_dir
from tests.support.server import assert_seqs_contiguous
from tests.support.tasks import all_messages, new_task, post_messages


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """Appends close together write from the event loop whatever the disk does (a limit no
    slow write reaches): the check that the files are still the size of this process's head
    runs there, and its refusal sends the append back to read the row."""
    return Settings(context_dir=context_dir, storage={"inline_file_work_ms": 100})


@pytest.fixture(autouse=True)
def rows_remembered_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """However slow the machine, every append here within a minute of the app's last one
    takes the copy of the row (it is kept for a second otherwise)."""
    monkeypatch.setattr("app.context.store.REMEMBERED_ROW_S", 60.0)


async def test_two_apps_appending_in_turn_give_every_seq_once(
    settings: Settings, context_dir: Path
) -> None:
    """Each app's copy of the row is out of date at every append of its own (the other
    appended since): every append still gets the next seq, and the files hold them in order."""
    async with running_app(settings) as first, running_app(settings) as second:
        uuid = await new_task(first)
        seqs = []
        for i in range(12):
            client = (first, second)[i % 2]
            body = {"role": "user", "content": f"message {i}"}
            seqs += (await post_messages(client, uuid, body))["seqs"]
        assert seqs == list(range(2, 14))
        for client in (first, second):
            history = await all_messages(client, uuid)
            assert_seqs_contiguous(history)
            assert [m["content"] for m in history[1:]] == [f"message {i}" for i in range(12)]
        on_disk = read_jsonl(task_dir(context_dir, uuid) / "messages.jsonl")
        assert [r["content"] for r in on_disk[1:]] == [f"message {i}" for i in range(12)]


async def test_an_append_after_the_other_app_adopted_the_earlier_ones_is_counted(
    context_dir: Path,
) -> None:
    """The first app's append is pending (its head not yet in the database) when the second
    reads the task: the second adopts it from the files and counts it. The first app's next
    append goes from its copy of the row, over the same pending head: the database then holds
    the second's head, which the pending one only reaches half-way. Every message is counted
    once, in the counters every listing reads."""
    # Written behind only when a read asks: the second app reads the first's append as files.
    flushed_late = Settings(
        context_dir=context_dir,
        storage={"inline_file_work_ms": 100, "head_flush_ms": 10_000},
    )
    async with running_app(flushed_late) as first, running_app(flushed_late) as second:
        uuid = await new_task(first)
        await post_messages(first, uuid, {"role": "user", "content": "m1"})
        adopted = (await second.get(f"/tasks/{uuid}")).json()
        assert adopted["statistics"]["total_messages"] == 2
        await post_messages(first, uuid, {"role": "user", "content": "m2"})
        for client in (first, second):  # a listing flushes what is pending, then reads rows
            (listed,) = (await client.get("/tasks")).json()["tasks"]
            assert listed["statistics"]["total_messages"] == 3


async def test_an_append_after_the_other_app_stopped_the_task_is_refused(
    settings: Settings, context_dir: Path
) -> None:
    """The first app's copy says running; the second stopped the task (its directory moved to
    paused/): the append is a 409 and writes nothing anywhere."""
    async with running_app(settings) as first, running_app(settings) as second:
        uuid = await new_task(first)
        await post_messages(first, uuid, {"role": "user", "content": "before the stop"})
        stopped = await second.post(f"/tasks/{uuid}/stop")
        assert stopped.status_code == 200, stopped.text
        before = snapshot_dir(context_dir)
        response = await first.post(
            f"/tasks/{uuid}/messages", json={"role": "user", "content": "after the stop"}
        )
        assert_error(response, 409, "task_not_writable")
        assert snapshot_dir(context_dir) == before
        assert locations(context_dir, uuid) == ["paused"]
