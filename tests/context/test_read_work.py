"""Which reads of a context run on the event loop: the task's row (on SQLite, through a
blocking connection) and current.jsonl opened and checked for a payload, while such reads are
quick and there is little to parse (what a payload of this process found whole before is only
hashed). A read that would wait or work longer (a first check of many bytes, a file rewritten
since, a file larger than one read, a large metadata.json, a directory to move, the database
busy) is made in a worker thread. Either way the same payload is
served, and damage made in place is found. Where each read ran is the service's metric
``context_file_work_total{work="read"}``; on PostgreSQL the row is read asynchronously, and the
loop's share is the directory's check and the file's opening."""

import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import event

from app.context.snapshots import LOOP_PARSE_BYTES
from app.lifespan import open_services
from app.messages.schemas import MessageIn
from app.storage.jsonl import CHUNK
from app.tasks.schemas import TaskCreate
from tests.support.app import running_app
from tests.support.conversations import user
from tests.support.files import task_dir
from tests.support.metrics import file_work_runs
from tests.support.settings import loop_work_settings
from tests.support.tasks import (
    SYSTEM_PROMPT,
    new_task,
    post_messages,
    task_body,
    task_with_messages,
)


async def payload_and_runs(
    client: httpx.AsyncClient, uuid: str
) -> tuple[httpx.Response, tuple[float, float]]:
    """GET /request (asserts 200) and how many reads ran on the loop and in threads for it."""
    before = await file_work_runs(client, "read")
    response = await client.get(f"/tasks/{uuid}/request")
    assert response.status_code == 200, response.text
    after = await file_work_runs(client, "read")
    return response, (after[0] - before[0], after[1] - before[1])


def contents(response: httpx.Response) -> list[str]:
    return [m["content"] for m in response.json()["messages"]][1:]  # after the system prompt


async def long_context(client: httpx.AsyncClient) -> str:
    """A task whose current.jsonl is past LOOP_PARSE_BYTES."""
    uuid = await new_task(client)
    long_text = "word " * 2000
    for n in range(LOOP_PARSE_BYTES // len(long_text) + 2):
        await post_messages(client, uuid, user(f"{n} {long_text}"))
    return uuid


async def test_a_small_context_is_read_from_the_loop_and_served_alike(
    context_dir: Path, database_url: str
) -> None:
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await task_with_messages(client, 5, "step")
        first, ran = await payload_and_runs(client, uuid)
        # SQLite: one call; PostgreSQL: the directory's check, then the file's opening.
        assert ran == ((2, 0) if database_url else (1, 0))
        assert contents(first) == [f"step {n}" for n in range(5)]
    async with running_app(loop_work_settings(context_dir, limit_ms=0)) as client:
        threaded, ran = await payload_and_runs(client, uuid)
        assert ran == ((0, 2) if database_url else (0, 1))
    assert threaded.content == first.content
    assert threaded.headers["X-Context-Tokens"] == first.headers["X-Context-Tokens"]


async def test_a_first_check_of_many_bytes_runs_in_a_worker_thread(context_dir: Path) -> None:
    """Past LOOP_PARSE_BYTES not yet found whole: the row is read on the loop, current.jsonl
    checked in a thread. The next payloads parse only what was appended since: on the loop."""
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await long_context(client)
        _, ran = await payload_and_runs(client, uuid)
        assert ran == (1, 1)
        await post_messages(client, uuid, user("short"))
        served, (_, in_threads) = await payload_and_runs(client, uuid)
        assert in_threads == 0
        assert contents(served)[-1] == "short"


async def test_a_context_rewritten_since_it_was_found_whole_is_checked_in_a_worker_thread(
    context_dir: Path, database_url: str
) -> None:
    """Its hash no longer matches: the whole file is to be parsed, more than the loop takes.
    The read on the loop stops there and is made again in a thread."""
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await long_context(client)
        await payload_and_runs(client, uuid)
        _, ran = await payload_and_runs(client, uuid)
        assert ran[1] == 0  # found whole: only hashed now
        current = task_dir(context_dir, uuid) / "current.jsonl"
        current.write_bytes(current.read_bytes().replace(b"0 word", b"0 WORD", 1))
        served, ran = await payload_and_runs(client, uuid)
        assert ran == ((2, 1) if database_url else (1, 1))  # the loop's attempt, the thread's
        assert contents(served)[0].startswith("0 WORD")  # a line that parses is served


async def test_a_context_larger_than_one_read_is_checked_in_a_worker_thread(
    context_dir: Path,
) -> None:
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await new_task(client, context_length=4_000_000)
        piece = "x" * (256 << 10)
        for n in range(CHUNK // len(piece) + 1):
            await post_messages(client, uuid, user(f"{n} {piece}"))
        for _ in range(2):  # found whole the first time, it is still more than one read
            served, ran = await payload_and_runs(client, uuid)
            assert ran == (1, 1)
            assert len(contents(served)) == CHUNK // len(piece) + 1


async def test_a_large_metadata_json_is_read_in_a_worker_thread(context_dir: Path) -> None:
    """The task's tools live in its metadata.json, read with the snapshot."""
    tool = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "d" * (LOOP_PARSE_BYTES + 1000),
            "parameters": {"type": "object", "properties": {}},
        },
    }
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await new_task(client, tools=[tool])
        await post_messages(client, uuid, user("hello"))
        served, ran = await payload_and_runs(client, uuid)
        assert ran == (1, 1)
        assert served.json()["tools"][0]["function"]["name"] == "search"


async def test_a_misplaced_directory_is_moved_from_a_worker_thread(
    context_dir: Path, database_url: str
) -> None:
    """As a crash between a status change's move and its commit could leave it."""
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await task_with_messages(client, 2, "step")
        misplaced = context_dir / "paused" / uuid
        misplaced.parent.mkdir(exist_ok=True)
        shutil.move(task_dir(context_dir, uuid), misplaced)
        served, ran = await payload_and_runs(client, uuid)
        assert ran == ((2, 1) if database_url else (1, 1))
        assert contents(served) == ["step 0", "step 1"]
    assert task_dir(context_dir, uuid) == context_dir / "running" / uuid


async def test_damage_is_found_from_the_loop(context_dir: Path) -> None:
    """Bytes changed in place inside what the last payload found whole: the hash differs, the
    context is rebuilt from messages.jsonl before any byte is served."""
    async with running_app(loop_work_settings(context_dir)) as client:
        uuid = await task_with_messages(client, 5, "step")
        await payload_and_runs(client, uuid)
        current = task_dir(context_dir, uuid) / "current.jsonl"
        intact = current.read_bytes()
        lines = intact.split(b"\n")
        lines[2] = b"\x00" * len(lines[2])
        current.write_bytes(b"\n".join(lines))
        served, (on_loop, _) = await payload_and_runs(client, uuid)
        assert on_loop >= 1
        assert contents(served) == [f"step {n}" for n in range(5)]
    assert current.read_bytes() == intact


async def test_a_limit_of_zero_keeps_every_read_in_worker_threads(context_dir: Path) -> None:
    async with running_app(loop_work_settings(context_dir, limit_ms=0)) as client:
        uuid = await task_with_messages(client, 3, "step")
        for _ in range(3):
            _, (on_loop, in_threads) = await payload_and_runs(client, uuid)
            assert on_loop == 0
            assert in_threads >= 1


def _busy() -> sqlite3.OperationalError:
    """What pysqlite raises when another connection holds the lock a statement needs."""
    error = sqlite3.OperationalError("database is locked")
    error.sqlite_errorcode = sqlite3.SQLITE_BUSY
    error.sqlite_errorname = "SQLITE_BUSY"
    return error


async def test_a_busy_database_is_read_again_from_a_worker_thread(
    context_dir: Path, database_url: str
) -> None:
    """The driver answers the loop's read SQLITE_BUSY (as it does while another connection
    holds the database in exclusive locking mode, tests/db/test_engine.py): the read stops at
    once and is made again through the reader that waits, in a worker thread."""
    if database_url:
        pytest.skip("SQLite's locks")
    settings = loop_work_settings(context_dir)
    async with open_services(settings) as services:
        created, _ = await services.task_creation.create(
            TaskCreate.model_validate(task_body(system_prompt=SYSTEM_PROMPT))
        )
        uuid = created.task.uuid
        await services.messages.append(uuid, [MessageIn.model_validate(user("step 0"))], None)
        quick, waiting = services.db.quick_reader, services.db.blocking_reader
        assert quick is not None
        assert waiting is not None
        read_by: dict[str, list[threading.Thread]] = {"quick": [], "waiting": []}

        @event.listens_for(quick, "do_execute")
        def busy(*_: Any) -> None:
            read_by["quick"].append(threading.current_thread())
            raise _busy()

        @event.listens_for(waiting, "do_execute")
        def read(*_: Any) -> None:
            read_by["waiting"].append(threading.current_thread())

        stream = await services.payloads.request(uuid, None)
        served = orjson.loads(await stream.read())
    assert read_by["quick"] == [threading.main_thread()]
    assert len(read_by["waiting"]) == 1
    assert read_by["waiting"][0] is not threading.main_thread()
    assert [m["content"] for m in served["messages"]][1:] == ["step 0"]
