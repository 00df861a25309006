"""Pending heads: what an append acknowledged before the database's head moved to it.

The bookkeeping on its own (pure), then the real app writing its batches on time."""

import asyncio
import logging
import sqlite3
import threading
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from app.config import Settings
from app.context.pending import MAX_STEPS, PendingHeads
from app.context.records import HeadState, IdempotentResult, StatsDelta
from app.lifespan import Services, open_services
from app.messages.schemas import MessageIn
from app.tasks.schemas import TaskCreate
from tests.support.app import running_app
from tests.support.database import run_sql, sqlite_write_lock_held, statements_of
from tests.support.tasks import task_body

NOW = datetime(2026, 11, 26, tzinfo=UTC)
BASE = HeadState(last_seq=3, messages_bytes=300, current_bytes=200, current_messages=3)


def head(seq: int) -> HeadState:
    return HeadState(
        last_seq=seq, messages_bytes=100 * seq, current_bytes=70 * seq, current_messages=seq
    )


def test_appends_accumulate_from_one_base() -> None:
    pending = PendingHeads()
    key = ("t1", 0)
    first = IdempotentResult("k1", "hash", {"seqs": [4]})
    pending.add(key, BASE, head(4), StatsDelta(messages=1), [first], NOW)
    pending.add(key, head(4), head(6), StatsDelta(messages=2, tool_calls=1), [], NOW)

    entry = pending.view(key, BASE)
    assert entry is not None
    assert entry.base == BASE  # the database's head, not the previous pending one
    assert entry.head == head(6)
    assert (entry.stats.messages, entry.stats.tool_calls) == (3, 1)
    assert entry.keys == {"k1": first}


def test_the_steps_another_process_adopted_are_dropped_and_the_later_ones_kept() -> None:
    """It adopted what the files held when it took the lock: the first group commits' records.
    The later ones are still this process's to count."""
    pending = PendingHeads()
    key = ("t1", 0)
    first, third = (IdempotentResult(k, "hash", {"seqs": []}) for k in ("k1", "k3"))
    pending.add(key, BASE, head(4), StatsDelta(messages=1), [first], NOW)
    pending.add(key, head(4), head(6), StatsDelta(messages=2, tool_calls=1), [], NOW)
    pending.add(key, head(6), head(7), StatsDelta(messages=1, llm_calls=1), [third], NOW)

    left = pending.view(key, head(4))
    assert left is not None
    assert (left.base, left.head) == (head(4), head(7))
    assert (left.stats.messages, left.stats.tool_calls, left.stats.llm_calls) == (3, 1, 1)
    assert left.keys == {"k3": third}
    assert pending.get(key) == left  # kept so

    assert pending.view(key, head(7)) is None  # it adopted them all
    assert len(pending) == 0


def test_a_database_head_read_without_the_lock_changes_nothing_pending() -> None:
    """Read before this process wrote its newer head (and appended over it): older than
    anything pending, it is looked at and nothing is dropped."""
    pending = PendingHeads()
    key = ("t1", 0)
    pending.add(key, head(5), head(6), StatsDelta(messages=1), [], NOW)
    assert pending.over(key, BASE) is None
    left = pending.over(key, head(5))
    assert left is not None
    assert left.head == head(6)
    assert len(pending) == 1


def test_steps_past_the_most_kept_apart_merge_the_oldest() -> None:
    """A round that keeps failing must not let them grow without end: the newest heads are
    still told apart, and nothing is lost from the totals."""
    pending = PendingHeads()
    key = ("t1", 0)
    last = BASE.last_seq + MAX_STEPS + 10
    for seq in range(BASE.last_seq + 1, last + 1):
        pending.add(key, head(seq - 1), head(seq), StatsDelta(messages=1), [], NOW)
    entry = pending.get(key)
    assert entry is not None
    assert len(entry.steps) == MAX_STEPS
    assert entry.stats.messages == MAX_STEPS + 10
    left = pending.view(key, head(last - 2))
    assert left is not None
    assert (left.head, left.stats.messages) == (head(last), 2)


def test_a_database_head_moved_by_another_process_drops_the_pending_one() -> None:
    """Whoever moved it adopted these records from the files and counted them."""
    pending = PendingHeads()
    pending.add(("t1", 0), BASE, head(5), StatsDelta(messages=2), [], NOW)
    assert pending.view(("t1", 0), head(7)) is None
    assert pending.get(("t1", 0)) is None
    assert len(pending) == 0


def test_tasks_group_their_contexts_and_served_tokens() -> None:
    pending = PendingHeads()
    pending.add(("t1", 0), BASE, head(4), StatsDelta(messages=1), [], NOW)
    pending.add(("t1", 2), BASE, head(4), StatsDelta(messages=1), [], NOW)
    pending.add(("t2", 0), BASE, head(4), StatsDelta(messages=1), [], NOW)
    pending.served["t3"] = 1200
    assert pending.tasks() == {"t1", "t2", "t3"}
    assert pending.has_threads("t1")
    assert not pending.has_threads("t2")
    assert [key for key, _ in pending.of_tasks({"t1"})] == [("t1", 0), ("t1", 2)]
    pending.take_tasks({"t1", "t3"})
    assert pending.tasks() == {"t2"}


def committed(context_dir: Path, uuid: str) -> tuple[int, int, int]:
    heads, tasks = run_sql(
        context_dir,
        ("SELECT last_seq FROM context_heads WHERE task_uuid = :u", {"u": uuid}),
        ("SELECT total_messages, tool_call_count FROM tasks WHERE uuid = :u", {"u": uuid}),
    )
    return int(heads[0][0]), int(tasks[0][0]), int(tasks[0][1])


async def new_task_in(services: Services) -> str:
    """A new task, created in the services directly; its uuid."""
    body = TaskCreate.model_validate(task_body(system_prompt="You are an agent."))
    created, _ = await services.task_creation.create(body)
    return created.task.uuid


async def test_a_batch_writes_heads_and_counters_without_any_read(context_dir: Path) -> None:
    settings = Settings(context_dir=context_dir, storage={"head_flush_ms": 20})
    async with running_app(settings) as client:
        created = await client.post("/tasks", json=task_body(system_prompt="You are an agent."))
        uuid = created.json()["uuid"]
        call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        messages = [
            {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        ]
        response = await client.post(f"/tasks/{uuid}/messages", json={"messages": messages})
        assert response.status_code == 201, response.text
        for _ in range(100):
            if committed(context_dir, uuid) == (4, 4, 1):
                break
            await asyncio.sleep(0.02)
        assert committed(context_dir, uuid) == (4, 4, 1)


async def test_shutdown_writes_what_is_pending(context_dir: Path) -> None:
    settings = Settings(context_dir=context_dir, storage={"head_flush_ms": 10_000})
    async with running_app(settings) as client:
        created = await client.post("/tasks", json=task_body(system_prompt="You are an agent."))
        uuid = created.json()["uuid"]
        for i in range(3):
            message = {"role": "user", "content": f"note {i}"}
            assert (await client.post(f"/tasks/{uuid}/messages", json=message)).is_success
        assert committed(context_dir, uuid) == (1, 1, 0)
    assert committed(context_dir, uuid) == (4, 4, 0)


@pytest.mark.sqlite_only  # the blocking writer is SQLite's
async def test_a_round_on_sqlite_is_one_call_of_a_worker_thread(context_dir: Path) -> None:
    """A round holds its tasks' locks while it writes: on SQLite its transaction goes to a
    worker thread in one call, through the driver's blocking API, and none of its statements
    through aiosqlite (one hand-off to the database's thread each)."""
    settings = Settings(context_dir=context_dir, storage={"head_flush_ms": 10_000})
    async with open_services(settings) as services:
        uuid = await new_task_in(services)
        for step in range(3):
            note = MessageIn.model_validate({"role": "user", "content": f"step {step}"})
            await services.messages.append(uuid, [note], None)
        assert committed(context_dir, uuid) == (1, 1, 0)
        writer = services.db.blocking_writer
        assert writer is not None
        ran_on: dict[str, list[threading.Thread]] = {"aiosqlite": [], "blocking": []}

        @event.listens_for(services.db.engine.sync_engine, "do_execute")
        def through_aiosqlite(*_: Any) -> None:
            ran_on["aiosqlite"].append(threading.current_thread())

        @event.listens_for(writer, "do_execute")
        def through_the_blocking_writer(*_: Any) -> None:
            ran_on["blocking"].append(threading.current_thread())

        await services.store.write_behind.flush(wait=False)
        assert committed(context_dir, uuid) == (4, 4, 0)
        assert ran_on["aiosqlite"] == []
        assert len(ran_on["blocking"]) >= 3  # the heads read, the heads and the tasks moved
        assert len(set(ran_on["blocking"])) == 1
        assert ran_on["blocking"][0] is not threading.main_thread()


@pytest.mark.sqlite_only  # PostgreSQL locks rows: a round waits for no other writer
async def test_a_round_waiting_for_the_database_keeps_no_append_waiting(
    context_dir: Path,
) -> None:
    """While another process holds SQLite's write lock, a round of the write-behind waits for
    it; appends to the task it has pending go on meanwhile (the round's call that would not
    wait gave way, and the round takes the task's lock only once its transaction is begun),
    and the round writes them all once it gets in."""
    settings = Settings(context_dir=context_dir, storage={"head_flush_ms": 20})
    async with running_app(settings) as client:
        created = await client.post("/tasks", json=task_body(system_prompt="You are an agent."))
        uuid = created.json()["uuid"]
        note = {"role": "user", "content": "note"}
        async with sqlite_write_lock_held(settings.effective_database_url):
            assert (await client.post(f"/tasks/{uuid}/messages", json=note)).is_success
            await asyncio.sleep(0.2)  # a round is under way, waiting for the lock
            for _ in range(3):
                appended = client.post(f"/tasks/{uuid}/messages", json=note)
                assert (await asyncio.wait_for(appended, 5)).is_success
            assert committed(context_dir, uuid) == (1, 1, 0)
        for _ in range(100):
            if committed(context_dir, uuid) == (5, 5, 0):
                break
            await asyncio.sleep(0.02)
        assert committed(context_dir, uuid) == (5, 5, 0)


async def keys_and_served(services: Services, uuid: str) -> tuple[list[str], int | None]:
    """The task's registered idempotency keys and its served tokens, read in the service's
    own database."""
    async with services.db.statements() as session:
        keys = await session.execute(
            text("SELECT key FROM idempotency_keys WHERE task_uuid = :u ORDER BY key"),
            {"u": uuid},
        )
        served = await session.execute(
            text("SELECT served_tokens FROM tasks WHERE uuid = :u"), {"u": uuid}
        )
        return list(keys.scalars()), served.scalar_one()


@pytest.mark.sqlite_only  # the call that would not wait is SQLite's
async def test_a_round_that_gave_way_writes_keys_and_served_tokens_too(
    context_dir: Path,
) -> None:
    """A round begun while another process holds SQLite's write lock: its quick call gives way
    at once, and the usual transaction it takes instead (through aiosqlite, waiting for the
    lock) writes all it had pending: heads and counters, the idempotency keys, and the tokens
    of the payload served."""
    settings = Settings(context_dir=context_dir, storage={"head_flush_ms": 10_000})
    async with open_services(settings) as services:
        uuid = await new_task_in(services)
        for key in ("first", "second"):
            note = MessageIn.model_validate({"role": "user", "content": f"the {key} note"})
            await services.messages.append(uuid, [note], key)
        await (await services.payloads.request(uuid, None)).read()
        assert services.db.blocking_writer is not None
        quick, usual = statements_of(services.db.blocking_writer, services.db.engine.sync_engine)
        async with sqlite_write_lock_held(settings.effective_database_url):
            round_ = asyncio.create_task(services.store.write_behind.flush(wait=False))
            for _ in range(500):  # the quick call refused; the usual one waits for the lock
                if quick and "BEGIN" in usual:
                    break
                await asyncio.sleep(0.01)
            assert quick == ["BEGIN"]
            assert "BEGIN" in usual
            assert not round_.done()
        await asyncio.wait_for(round_, 30)
        assert "UPDATE" in usual
        assert quick == ["BEGIN"]
        assert committed(context_dir, uuid) == (3, 3, 0)
        keys, served = await keys_and_served(services, uuid)
        assert keys == ["first", "second"]
        assert served is not None
        assert served > 0


@pytest.mark.sqlite_only
async def test_without_a_write_ahead_log_a_round_takes_the_usual_transaction(
    context_dir: Path,
) -> None:
    """Where SQLite keeps its rollback journal (here SQLite's unix-none VFS, as on a file system
    without shared memory), a commit that waits for no one would fail whenever a read
    overlapped it: the round's quick call refuses before it begins, and the usual transaction
    writes the heads."""
    database = context_dir / "tasks.db"
    url = f"sqlite+aiosqlite:///file:{database}?vfs=unix-none&uri=true"
    settings = Settings(
        context_dir=context_dir, database_url=url, storage={"head_flush_ms": 10_000}
    )
    async with open_services(settings) as services:
        assert await services.db.journal_mode() == "delete"
        uuid = await new_task_in(services)
        note = MessageIn.model_validate({"role": "user", "content": "a note"})
        await services.messages.append(uuid, [note], "only")
        assert services.db.blocking_writer is not None
        quick, usual = statements_of(services.db.blocking_writer, services.db.engine.sync_engine)
        await services.store.write_behind.flush(wait=False)
        assert quick == []
        assert "UPDATE" in usual
        assert len(services.store.write_behind.pending) == 0
        keys, _ = await keys_and_served(services, uuid)
        assert keys == ["only"]


@pytest.mark.sqlite_only  # the trigger is made from another connection to the file
async def test_a_round_the_database_fails_is_tried_again_less_often_until_it_works(
    context_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A round the database fails with an error of its own (here a trigger refusing every
    change of a head) is logged in full once; the rounds go on, further apart while they keep
    failing, and once the database takes the change again the heads are written, though no
    append or read came to start them."""
    caplog.set_level(logging.WARNING, logger="app.context.write_behind")
    settings = Settings(context_dir=context_dir, storage={"head_flush_ms": 20})
    async with open_services(settings) as services:
        uuid = await new_task_in(services)
        database = make_url(settings.effective_database_url).database
        assert database is not None
        with closing(sqlite3.connect(database, isolation_level=None)) as other:
            other.execute(
                "CREATE TRIGGER refuse BEFORE UPDATE ON context_heads "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
            note = MessageIn.model_validate({"role": "user", "content": "a note"})
            await services.messages.append(uuid, [note], None)
            await asyncio.sleep(1.5)
            failures = [r for r in caplog.records if "not written" in r.getMessage()]
            # Every 20 ms that would be ~75 rounds; doubling from there, a handful.
            assert 2 <= len(failures) <= 10, [r.getMessage() for r in failures]
            assert failures[0].exc_info is not None
            assert "refused by the test" in str(failures[0].exc_info[1])
            assert all(r.exc_info is None for r in failures[1:])
            assert committed(context_dir, uuid) == (1, 1, 0)
            other.execute("DROP TRIGGER refuse")
        for _ in range(1000):
            if not services.store.write_behind.pending:
                break
            await asyncio.sleep(0.01)
        assert len(services.store.write_behind.pending) == 0
        assert committed(context_dir, uuid) == (2, 2, 0)
