"""Crashes of a real server: kill -9 in the middle of appends, torn lines, a lost current.jsonl.

Every acknowledged write must survive, the task must read cleanly afterwards, seq must go on
from where the history ends, and a retry with the same Idempotency-Key must never duplicate.
"""

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.database import run_sql
from tests.support.schemas import validate_openai_request
from tests.support.server import (
    Server,
    ServerPool,
    assert_seqs_contiguous,
    client_limits,
    jsonl_records,
)
from tests.support.tasks import SYSTEM_PROMPT, all_messages, task_body, task_with_messages

pytestmark = pytest.mark.e2e

APPENDERS = 16
CYCLES = 3
ACKS_BEFORE_KILL = 60  # messages acknowledged in a cycle before the kill
CYCLE_TIMEOUT_S = 30.0
KILL_DELAYS_S = (0.0, 0.003, 0.01)  # after the ACKS_BEFORE_KILL-th answer, per cycle


@dataclass
class Unanswered:
    """An append whose answer was lost in the crash: it may or may not have been written."""

    body: dict[str, Any]
    key: str | None
    contents: list[str]


@dataclass
class Ledger:
    acked: dict[int, str] = field(default_factory=dict)  # seq -> content, from answers
    unanswered: list[Unanswered] = field(default_factory=list)

    def ack(self, seqs: list[int], contents: list[str]) -> None:
        assert len(seqs) == len(contents)
        for seq, content in zip(seqs, contents, strict=True):
            assert self.acked.setdefault(seq, content) == content, f"seq {seq} acked twice"


def _body(contents: list[str]) -> dict[str, Any]:
    messages = [{"role": "user", "content": c} for c in contents]
    return messages[0] if len(messages) == 1 else {"messages": messages}


async def _appender(
    http: httpx.AsyncClient,
    uuid: str,
    name: str,
    keyed: bool,
    ledger: Ledger,
    enough: asyncio.Event,
    acks_before_kill: int,
) -> None:
    """Append until the server goes away; note every answer, and the append that got none."""
    n = 0
    while True:
        size = 2 if n % 3 == 2 else 1
        contents = [f"{name} message {n} part {k}" for k in range(size)]
        key = f"{name}-{n}" if keyed else None
        headers = {"Idempotency-Key": key} if key else {}
        try:
            response = await http.post(
                f"/tasks/{uuid}/messages", json=_body(contents), headers=headers
            )
        except httpx.TransportError:
            ledger.unanswered.append(Unanswered(_body(contents), key, contents))
            return
        assert response.status_code == 201, response.text
        ledger.ack(response.json()["seqs"], contents)
        if len(ledger.acked) >= acks_before_kill:
            enough.set()
        n += 1


async def _retry_unanswered(http: httpx.AsyncClient, uuid: str, ledger: Ledger) -> int:
    """Retry every unanswered keyed append with its key (twice: the second must be a replay of
    the first); returns how many first retries were replays of a write that had survived."""
    replays = 0
    for lost in ledger.unanswered:
        if lost.key is None:
            continue
        url, headers = f"/tasks/{uuid}/messages", {"Idempotency-Key": lost.key}
        response = await http.post(url, json=lost.body, headers=headers)
        assert response.status_code == 201, response.text
        replays += response.headers.get("Idempotent-Replayed") == "true"
        ledger.ack(response.json()["seqs"], lost.contents)
        again = await http.post(url, json=lost.body, headers=headers)
        assert again.status_code == 201, again.text
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert again.json() == response.json()
    return replays


async def _check_reads_cleanly(
    http: httpx.AsyncClient, uuid: str, ledger: Ledger, pool: ServerPool
) -> list[dict[str, Any]]:
    """History, payload and context all serve, agree, and hold every acknowledged message."""
    history = await all_messages(http, uuid, limit=250)
    assert_seqs_contiguous(history)
    stored = {r["seq"]: r["content"] for r in history}
    missing = {s: c for s, c in ledger.acked.items() if stored.get(s) != c}
    assert missing == {}, "acknowledged messages lost or moved"
    contents = [r["content"] for r in history]
    assert len(set(contents)) == len(contents), "a message was stored twice"

    response = await http.get(f"/tasks/{uuid}/request")
    assert response.status_code == 200, response.text
    payload = response.json()
    validate_openai_request(payload)
    assert [m["content"] for m in payload["messages"]] == contents

    context = await http.get(f"/tasks/{uuid}/context")
    assert context.status_code == 200, context.text
    assert context.json()["message_count"] == len(history)
    assert context.json()["last_seq"] == len(history)
    task = (await http.get(f"/tasks/{uuid}")).json()
    assert task["statistics"]["total_messages"] == len(history)
    assert task["context"]["last_seq"] == len(history)

    on_disk = jsonl_records(pool.context_dir / "running" / uuid / "messages.jsonl")
    assert_seqs_contiguous(on_disk)
    assert [r["content"] for r in on_disk] == contents
    return history


async def _new_append_continues(http: httpx.AsyncClient, uuid: str, ledger: Ledger) -> None:
    last_seq = (await http.get(f"/tasks/{uuid}")).json()["context"]["last_seq"]
    content = f"after restart {last_seq}"
    response = await http.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": content})
    assert response.status_code == 201, response.text
    assert response.json()["seqs"] == [last_seq + 1]
    ledger.ack([last_seq + 1], [content])


async def _crash_cycle(srv: Server, uuid: str, cycle: int, ledger: Ledger) -> None:
    """Appenders stream appends; once enough were acknowledged, SIGKILL the server."""
    enough = asyncio.Event()
    acks_before_kill = len(ledger.acked) + ACKS_BEFORE_KILL
    limits = client_limits(APPENDERS)
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=20, limits=limits) as http:
        appenders = [
            asyncio.create_task(
                _appender(
                    http,
                    uuid,
                    f"cycle {cycle} appender {i}",
                    keyed=i % 2 == 1,
                    ledger=ledger,
                    enough=enough,
                    acks_before_kill=acks_before_kill,
                )
            )
            for i in range(APPENDERS)
        ]
        try:
            await asyncio.wait_for(enough.wait(), CYCLE_TIMEOUT_S)
            # Vary the moment relative to the group commit the last answer came from.
            await asyncio.sleep(KILL_DELAYS_S[cycle % len(KILL_DELAYS_S)])
            srv.kill()
            await asyncio.wait_for(asyncio.gather(*appenders), CYCLE_TIMEOUT_S)
        finally:
            for task in appenders:
                task.cancel()


async def test_kill_9_during_appends_loses_no_acknowledged_write(servers: ServerPool) -> None:
    """Three times: 16 clients (half with Idempotency-Keys, some batches) stream appends and
    the server is SIGKILLed mid-stream. After each restart every acknowledged (seq, content)
    is there, the task reads cleanly (history, schema-valid payload, context), keyed retries
    of lost answers append nothing twice, and a new append gets last_seq + 1. Unkeyed groups
    commit from the event loop (a limit no disk stall reaches), keyed ones on SQLite from a
    worker thread: the kills land in both."""
    srv = servers.start(env={"INLINE_FILE_WORK_MS": "100"})
    ledger = Ledger()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        created = await http.post("/tasks", json=task_body(system_prompt=SYSTEM_PROMPT))
        assert created.status_code == 201, created.text
        uuid: str = created.json()["uuid"]
    ledger.ack([1], [SYSTEM_PROMPT])

    replays = survivors = 0
    for cycle in range(CYCLES):
        ledger.unanswered.clear()
        await _crash_cycle(srv, uuid, cycle, ledger)
        assert len(ledger.unanswered) == APPENDERS, "every appender was cut off by the kill"

        srv.start()
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
            if cycle % 2 == 1:
                # Let a read repair the files first: keys found there must be kept too.
                await _check_reads_cleanly(http, uuid, ledger, servers)
            replays += await _retry_unanswered(http, uuid, ledger)
            history = await _check_reads_cleanly(http, uuid, ledger, servers)
            stored = {r["content"] for r in history}
            for lost in ledger.unanswered:
                present = [c in stored for c in lost.contents]
                assert all(present) or not any(present), "half a batch survived"
                survivors += lost.key is None and all(present)
            await _new_append_continues(http, uuid, ledger)
            await _check_reads_cleanly(http, uuid, ledger, servers)
    print(
        f"acknowledged {len(ledger.acked)} messages over {CYCLES} kills; of the appends whose "
        f"answer was lost, {replays} keyed retries were replays and {survivors} unkeyed ones "
        "had been written"
    )


async def test_torn_line_is_cut_on_restart(servers: ServerPool) -> None:
    """A messages.jsonl ending mid-line beyond the committed records (a torn write) does not
    make the task unreadable: after restart the partial line is gone (and logged), history,
    payload and context agree, and the next append takes the seq after the last record."""
    srv = servers.start()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        uuid = await task_with_messages(http, 5)  # seqs 1 (system) .. 6
    srv.stop()

    path = servers.context_dir / "running" / uuid / "messages.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 6
    torn = json.dumps({"seq": 7, "role": "user", "content": "torn message", "tokens": 5})
    path.write_bytes(b"".join(lines) + torn.encode()[: len(torn) // 2])

    srv.start()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        ledger = Ledger()
        ledger.ack(list(range(1, 7)), [SYSTEM_PROMPT, *map("message {}".format, range(5))])
        history = await _check_reads_cleanly(http, uuid, ledger, servers)
        assert len(history) == 6
        assert path.read_bytes() == b"".join(lines), "exactly the torn line was cut"
        await _new_append_continues(http, uuid, ledger)
        history = await _check_reads_cleanly(http, uuid, ledger, servers)
        assert [r["seq"] for r in history] == list(range(1, 8))
    assert "torn bytes from messages.jsonl" in srv.log_text()


async def test_a_cut_acknowledged_line_is_damage_after_restart(servers: ServerPool) -> None:
    """The last acknowledged record itself cut while the server was down: after restart the
    task answers task_files_damaged naming seq 6 on reads and appends alike, and its file is
    left as found (an operator restores it or accepts the loss); seq 6 is never issued again."""
    srv = servers.start()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        uuid = await task_with_messages(http, 5)  # seqs 1 (system) .. 6
    srv.stop()

    path = servers.context_dir / "running" / uuid / "messages.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    damaged = b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2]
    path.write_bytes(damaged)

    srv.start()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        for response in (
            await http.get(f"/tasks/{uuid}/messages"),
            await http.get(f"/tasks/{uuid}/request"),
            await http.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": "!"}),
        ):
            assert response.status_code == 500, response.text
            error = response.json()["error"]
            assert error["code"] == "task_files_damaged"
            assert error["details"]["missing_seqs"] == [6, 6]
            assert response.headers["connection"] == "close"
    assert path.read_bytes() == damaged


HEAD_COLUMNS = "last_seq, messages_bytes, current_bytes, current_messages, context_tokens"
STATS_COLUMNS = "total_messages, llm_call_count, tool_call_count, total_tokens"


def _committed_state(context_dir: Path, uuid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    head, stats = run_sql(
        context_dir,
        (f"SELECT {HEAD_COLUMNS} FROM context_heads WHERE task_uuid = :uuid", {"uuid": uuid}),
        (f"SELECT {STATS_COLUMNS} FROM tasks WHERE uuid = :uuid", {"uuid": uuid}),
    )
    return head[0]._asdict(), stats[0]._asdict()


def _lose_last_commit(
    context_dir: Path, uuid: str, state: tuple[dict[str, Any], dict[str, Any]], key: str
) -> None:
    """Put the database back as it was before the last append committed (the files keep it)."""
    head, stats = state
    head_assigns = ", ".join(f"{c} = :{c}" for c in head)
    stats_assigns = ", ".join(f"{c} = :{c}" for c in stats)
    *_, deleted = run_sql(
        context_dir,
        (f"UPDATE context_heads SET {head_assigns} WHERE task_uuid = :uuid", head | {"uuid": uuid}),
        (f"UPDATE tasks SET {stats_assigns} WHERE uuid = :uuid", stats | {"uuid": uuid}),
        (
            "DELETE FROM idempotency_keys WHERE task_uuid = :uuid AND key = :key",
            {"uuid": uuid, "key": key},
        ),
    )
    assert deleted == 1


@pytest.mark.parametrize("read_first", [False, True], ids=["retry-first", "read-first"])
async def test_keyed_retry_of_a_write_whose_commit_was_lost(
    servers: ServerPool, read_first: bool
) -> None:
    """The crash window between writing the files and committing the head, made exact: the
    database is put back to before a keyed batch committed while its records stay on disk.
    After restart the retry with the same Idempotency-Key is a replay with the original
    answer (whether a read repaired the files first or not): nothing is written twice, the
    statistics count the batch once, and the next append continues the seq."""
    srv = servers.start()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        uuid = await task_with_messages(http, 1)  # seqs 1 (system), 2
    srv.stop()
    before = _committed_state(servers.context_dir, uuid)

    key = "retry-after-crash"
    body = {"messages": [{"role": "user", "content": "b1"}, {"role": "user", "content": "b2"}]}
    srv.start()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        original = await http.post(
            f"/tasks/{uuid}/messages", json=body, headers={"Idempotency-Key": key}
        )
        assert original.status_code == 201, original.text
        assert original.json()["seqs"] == [3, 4]
    srv.stop()
    _lose_last_commit(servers.context_dir, uuid, before, key)

    srv.start()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        ledger = Ledger()
        ledger.ack([1, 2, 3, 4], [SYSTEM_PROMPT, "message 0", "b1", "b2"])
        if read_first:
            await _check_reads_cleanly(http, uuid, ledger, servers)
        retried = await http.post(
            f"/tasks/{uuid}/messages", json=body, headers={"Idempotency-Key": key}
        )
        assert retried.status_code == 201, retried.text
        assert retried.headers.get("Idempotent-Replayed") == "true"
        assert retried.json() == original.json()
        history = await _check_reads_cleanly(http, uuid, ledger, servers)
        assert len(history) == 4
        await _new_append_continues(http, uuid, ledger)
    assert "written but not committed" in srv.log_text()


async def test_deleted_current_jsonl_is_rebuilt(servers: ServerPool) -> None:
    """current.jsonl deleted while the server was down is rebuilt from messages.jsonl: the
    payload after restart is byte for byte the payload before, tool calls included."""
    srv = servers.start()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        uuid = await task_with_messages(http, 3)
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
        }
        batch = {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [call],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 10},
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "print('a')"},
                {"role": "assistant", "content": "a.py prints a."},
            ]
        }
        assert (await http.post(f"/tasks/{uuid}/messages", json=batch)).status_code == 201
        before = await http.get(f"/tasks/{uuid}/request")
        assert before.status_code == 200, before.text
    srv.stop()

    current = servers.context_dir / "running" / uuid / "current.jsonl"
    current_bytes = current.read_bytes()
    current.unlink()

    srv.start()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        after = await http.get(f"/tasks/{uuid}/request")
        assert after.status_code == 200, after.text
        assert after.content == before.content
        assert after.headers["X-Context-Tokens"] == before.headers["X-Context-Tokens"]
        validate_openai_request(after.json())
        context = await http.get(f"/tasks/{uuid}/context")
        assert context.status_code == 200
        assert context.json()["message_count"] == 7
    assert current.read_bytes() == current_bytes
