"""Which appends write their files from the event loop. Only those whose work is a few
syscalls on small data: the files checked against this process's own head (nothing to repair),
no database read with them, small messages. Everything else keeps to worker threads, and both
ways commit the same records."""

from pathlib import Path

import pytest

from app.config import Settings
from app.lifespan import Services, open_services
from app.messages.schemas import MessageBatch
from app.tasks.schemas import TaskCreate
from tests.support.files import read_jsonl, task_dir
from tests.support.tasks import task_body


@pytest.fixture(autouse=True)
def rows_remembered_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """However slow the machine, an append within a minute of the last takes this process's
    copy of the row (kept for a second otherwise), as appends close together do."""
    monkeypatch.setattr("app.context.store.REMEMBERED_ROW_S", 60.0)


def quick_settings(context_dir: Path, *, limit_ms: float = 100.0) -> Settings:
    """A limit no slow machine's fsync reaches: which way an append goes is the test's alone."""
    return Settings(context_dir=context_dir, storage={"inline_file_work_ms": limit_ms})


async def new_task(services: Services) -> str:
    created, _ = await services.task_creation.create(TaskCreate.model_validate(task_body()))
    return created.task.uuid


async def append(
    services: Services, uuid: str, content: str, key: str | None = None
) -> tuple[int, int]:
    """Append one message; how many appends ran on the loop and in threads for it."""
    work = services.store.file_work
    before = work.inline_runs, work.thread_runs
    batch = MessageBatch.model_validate({"messages": [{"role": "user", "content": content}]})
    await services.messages.append(uuid, batch.messages, key)
    return work.inline_runs - before[0], work.thread_runs - before[1]


ON_THE_LOOP, IN_A_THREAD = (1, 0), (0, 1)


async def test_appends_close_together_write_from_the_loop_and_commit_alike(
    context_dir: Path,
) -> None:
    async with open_services(quick_settings(context_dir)) as services:
        uuid = await new_task(services)
        # The first append reads the task's row: the files may need a repair.
        assert await append(services, uuid, "step 0") == IN_A_THREAD
        for step in range(1, 6):
            assert await append(services, uuid, f"step {step}") == ON_THE_LOOP
        head = (await services.tasks.get(uuid)).head
    records = read_jsonl(task_dir(context_dir, uuid) / "messages.jsonl")
    assert [(r["seq"], r["content"]) for r in records] == [(n + 1, f"step {n}") for n in range(6)]
    current = read_jsonl(task_dir(context_dir, uuid) / "current.jsonl")
    assert [m["content"] for m in current] == [f"step {n}" for n in range(6)]
    assert head is not None
    assert (head.last_seq, head.context_tokens) == (6, sum(r["tokens"] for r in records))


async def test_a_large_message_is_written_from_a_worker_thread(context_dir: Path) -> None:
    """Counting a long message's tokens takes milliseconds: not on the loop."""
    async with open_services(quick_settings(context_dir)) as services:
        uuid = await new_task(services)
        await append(services, uuid, "first")
        assert await append(services, uuid, "x" * 9000) == IN_A_THREAD
        assert await append(services, uuid, "short again") == ON_THE_LOOP
    records = read_jsonl(task_dir(context_dir, uuid) / "messages.jsonl")
    assert [len(r["content"]) for r in records[1:]] == [9000, len("short again")]


async def test_a_keyed_append_reads_its_keys_beside_its_files(
    context_dir: Path, database_url: str
) -> None:
    """On SQLite a key's lookup is a blocking read in the same call as the files, so that call
    is a worker thread's; on PostgreSQL the lookup is asynchronous and the files may be
    written from the loop. Either way a replay is answered from the key."""
    async with open_services(quick_settings(context_dir)) as services:
        uuid = await new_task(services)
        await append(services, uuid, "first")
        expected = ON_THE_LOOP if database_url else IN_A_THREAD
        assert await append(services, uuid, "keyed", key="step-1") == expected
        assert await append(services, uuid, "keyed", key="step-1") == expected  # the replay
    records = read_jsonl(task_dir(context_dir, uuid) / "messages.jsonl")
    assert [r["content"] for r in records] == ["first", "keyed"]


async def test_a_limit_of_zero_keeps_every_append_in_worker_threads(context_dir: Path) -> None:
    async with open_services(quick_settings(context_dir, limit_ms=0)) as services:
        uuid = await new_task(services)
        for step in range(4):
            assert await append(services, uuid, f"step {step}") == IN_A_THREAD
