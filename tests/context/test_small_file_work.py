"""Which appends write their files from the event loop. Only those whose work is a few
syscalls on small data: an append to the root close after another (its files checked against
this process's own head, nothing to repair), reporting no usage, no database read with it,
small messages. Everything else keeps to worker threads, and both ways commit the same records.
Where each append's work ran is the service's metric ``context_file_work_total{work="append"}``."""

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.app import running_app
from tests.support.conversations import user
from tests.support.files import read_jsonl, task_dir
from tests.support.metrics import file_work_runs
from tests.support.settings import loop_work_settings
from tests.support.tasks import new_task, post_messages
from tests.support.threads import start


@pytest.fixture(autouse=True)
def rows_remembered_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """However slow the machine, an append within a minute of the last takes this process's
    copy of the row (kept for a second otherwise), as appends close together do."""
    monkeypatch.setattr("app.context.store.REMEMBERED_ROW_S", 60.0)


ON_THE_LOOP, IN_A_THREAD = (1, 0), (0, 1)


async def where_it_ran(
    client: httpx.AsyncClient, uuid: str, body: Any, **post: Any
) -> tuple[float, float]:
    """POST /messages; asserts 201; how many appends' file work ran on the loop and in
    threads for it."""
    before = await file_work_runs(client, "append")
    response = await client.post(f"/tasks/{uuid}/messages", json=body, **post)
    assert response.status_code == 201, response.text
    after = await file_work_runs(client, "append")
    return after[0] - before[0], after[1] - before[1]


async def test_appends_close_together_write_from_the_loop_and_commit_alike(
    context_dir: Path,
) -> None:
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await new_task(client)
        # The first append reads the task's row: the files may need a repair.
        assert await where_it_ran(client, uuid, user("step 0")) == IN_A_THREAD
        for step in range(1, 6):
            assert await where_it_ran(client, uuid, user(f"step {step}")) == ON_THE_LOOP
        task = (await client.get(f"/tasks/{uuid}")).json()
    records = read_jsonl(task_dir(context_dir, uuid) / "messages.jsonl")[1:]  # the system's
    assert [(r["seq"], r["content"]) for r in records] == [(n + 2, f"step {n}") for n in range(6)]
    current = read_jsonl(task_dir(context_dir, uuid) / "current.jsonl")[1:]
    assert [m["content"] for m in current] == [f"step {n}" for n in range(6)]
    assert task["statistics"]["total_messages"] == 7
    assert task["context"]["last_seq"] == 7


async def test_a_large_message_and_a_large_batch_are_written_from_a_worker_thread(
    context_dir: Path,
) -> None:
    """Counting long messages' tokens takes milliseconds: not on the loop, whether the size is
    one message's or a batch's."""
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await new_task(client)
        await post_messages(client, uuid, user("first"))
        assert await where_it_ran(client, uuid, user("x" * 9000)) == IN_A_THREAD
        batch = {"messages": [user("y" * 3000) for _ in range(3)]}
        assert await where_it_ran(client, uuid, batch) == IN_A_THREAD
        assert await where_it_ran(client, uuid, user("short again")) == ON_THE_LOOP
    records = read_jsonl(task_dir(context_dir, uuid) / "messages.jsonl")
    assert [len(r["content"]) for r in records[2:]] == [9000, 3000, 3000, 3000, 11]


async def test_an_append_reporting_usage_is_written_from_a_worker_thread(
    context_dir: Path,
) -> None:
    """Reported usage may calibrate the task: the append reads the task's row, so its files
    may need a repair."""
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await new_task(client)
        await post_messages(client, uuid, user("first"))
        reply = {"role": "assistant", "content": "done", "usage": {"prompt_tokens": 40}}
        assert await where_it_ran(client, uuid, reply) == IN_A_THREAD
        # The row may have changed: the next append reads it again, the one after does not.
        assert await where_it_ran(client, uuid, user("next")) == IN_A_THREAD
        assert await where_it_ran(client, uuid, user("and next")) == ON_THE_LOOP


async def test_an_append_to_a_thread_is_written_from_a_worker_thread(context_dir: Path) -> None:
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await new_task(client)
        await post_messages(client, uuid, user("first"))
        thread = {"thread_id": (await start(client, uuid, label="look around"))["thread_id"]}
        for step in range(3):
            body = user(f"in the thread {step}")
            assert await where_it_ran(client, uuid, body, params=thread) == IN_A_THREAD


async def test_a_keyed_append_reads_its_keys_beside_its_files(
    context_dir: Path, database_url: str
) -> None:
    """On SQLite a key's lookup is a blocking read in the same call as the files, so that call
    is a worker thread's; on PostgreSQL the lookup is asynchronous and the files may be
    written from the loop. Either way a replay is answered from the key."""
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await new_task(client)
        await post_messages(client, uuid, user("first"))
        expected = ON_THE_LOOP if database_url else IN_A_THREAD
        keyed = {"headers": {"Idempotency-Key": "step-1"}}
        assert await where_it_ran(client, uuid, user("keyed"), **keyed) == expected
        assert await where_it_ran(client, uuid, user("keyed"), **keyed) == expected  # replay
    records = read_jsonl(task_dir(context_dir, uuid) / "messages.jsonl")
    assert [r["content"] for r in records[1:]] == ["first", "keyed"]


async def test_a_limit_of_zero_keeps_every_append_in_worker_threads(context_dir: Path) -> None:
    async with running_app(loop_work_settings(context_dir, limit_ms=0)) as client:
        uuid = await new_task(client)
        for step in range(4):
            assert await where_it_ran(client, uuid, user(f"step {step}")) == IN_A_THREAD
