"""The append's commit point is its fsynced line in messages.jsonl; the database's head and the
task's counters follow in batches (HEAD_FLUSH_MS). Real servers, killed with SIGKILL while
heads are pending: every acknowledged append is in the history, the counters, /stats and the
idempotency keys after the restart, and two processes never count an append twice."""

import asyncio
from pathlib import Path
from typing import Any

import httpx

from tests.support.database import run_sql
from tests.support.server import ServerPool
from tests.support.tasks import new_task

NEVER_MS = (
    "10000"  # no batch written during the test: every head stays pending (the test takes less)
)


def committed(context_dir: Path, uuid: str) -> tuple[int, int]:
    """The database's last_seq of the task's root and its total_messages."""
    heads, tasks = run_sql(
        context_dir,
        ("SELECT last_seq FROM context_heads WHERE task_uuid = :u AND thread_id = 0", {"u": uuid}),
        ("SELECT total_messages FROM tasks WHERE uuid = :u", {"u": uuid}),
    )
    return int(heads[0][0]), int(tasks[0][0])


def turn(i: int) -> list[dict[str, Any]]:
    """An assistant call with its usage and the call's result: 2 messages, 1 LLM call."""
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    usage = {"prompt_tokens": 100, "completion_tokens": 10}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call], "usage": usage},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"file_{i}.py"},
    ]


async def test_appends_killed_with_their_heads_pending_are_all_there_after_restart(
    servers: ServerPool,
) -> None:
    srv = servers.start(env={"HEAD_FLUSH_MS": NEVER_MS})
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        uuid = await new_task(http)
        assert committed(servers.context_dir, uuid) == (1, 1)  # created: the system prompt
        keyed = {"messages": [{"role": "user", "content": "keyed"}]}
        first = await http.post(
            f"/tasks/{uuid}/messages", json=keyed, headers={"Idempotency-Key": "k1"}
        )
        assert first.status_code == 201, first.text
        for i in range(20):
            response = await http.post(f"/tasks/{uuid}/messages", json={"messages": turn(i)})
            assert response.status_code == 201, response.text
        # Acknowledged, and not in the database yet: the files are the commit point.
        assert committed(servers.context_dir, uuid) == (1, 1)
        # A replay within the same process answers from the pending keys.
        again = await http.post(
            f"/tasks/{uuid}/messages", json=keyed, headers={"Idempotency-Key": "k1"}
        )
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert again.json() == first.json()
    srv.kill()

    srv.start()
    # Startup adopted the files' tail: the database counts every acknowledged append before
    # anything asked for the task.
    assert committed(servers.context_dir, uuid) == (42, 42)
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        task = (await http.get(f"/tasks/{uuid}")).json()
        assert task["context"]["last_seq"] == 42
        statistics = task["statistics"]
        assert statistics["total_messages"] == 42
        assert statistics["llm_call_count"] == 20
        assert statistics["tool_call_count"] == 20
        assert statistics["total_tokens"] == 20 * 110
        stats = (await http.get("/stats")).json()
        assert stats["calls"]["llm_calls"] == 20
        replay = await http.post(
            f"/tasks/{uuid}/messages", json=keyed, headers={"Idempotency-Key": "k1"}
        )
        assert replay.headers.get("Idempotent-Replayed") == "true"
        assert replay.json() == first.json()
        history = (await http.get(f"/tasks/{uuid}/messages", params={"limit": 100})).json()
        assert [r["seq"] for r in history["messages"]] == list(range(1, 43))
    assert "contexts held appends their database heads lacked" in srv.log_text()


async def test_reads_of_the_task_show_every_acknowledged_append(servers: ServerPool) -> None:
    """With the heads pending, GET /tasks/{uuid}, GET /tasks and /stats write them first."""
    srv = servers.start(env={"HEAD_FLUSH_MS": NEVER_MS})
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        uuid = await new_task(http)
        for i in range(5):
            response = await http.post(f"/tasks/{uuid}/messages", json={"messages": turn(i)})
            assert response.status_code == 201, response.text
        assert committed(servers.context_dir, uuid) == (1, 1)
        listed = (await http.get("/tasks")).json()["tasks"]
        assert [t["statistics"]["total_messages"] for t in listed] == [11]
        assert committed(servers.context_dir, uuid) == (11, 11)
        await http.post(f"/tasks/{uuid}/messages", json={"messages": turn(5)})
        assert (await http.get("/stats")).json()["calls"]["llm_calls"] == 6
        await http.post(f"/tasks/{uuid}/messages", json={"messages": turn(6)})
        task = (await http.get(f"/tasks/{uuid}")).json()
        assert task["statistics"]["total_messages"] == 15
        await http.post(f"/tasks/{uuid}/messages", json={"messages": turn(7)})
        completed = await http.post(f"/tasks/{uuid}/complete")
        assert completed.status_code == 200, completed.text
        assert completed.json()["statistics"]["total_messages"] == 17


async def test_a_flush_after_another_process_adopted_the_appends_counts_them_once(
    servers: ServerPool,
) -> None:
    """Process A appends with its heads pending; process B appends to the same task, adopting
    A's records from the files and committing them; A's batch then finds the database head
    moved and drops its own: every message is counted once."""
    a = servers.start(env={"HEAD_FLUSH_MS": "300"})
    b = servers.start(env={"HEAD_FLUSH_MS": "0"})  # commits each append at once
    async with (
        httpx.AsyncClient(base_url=a.base_url, timeout=30) as to_a,
        httpx.AsyncClient(base_url=b.base_url, timeout=30) as to_b,
    ):
        uuid = await new_task(to_a)
        for round_ in range(5):
            for i in range(3):
                message = {"role": "user", "content": f"a {round_}.{i}"}
                assert (await to_a.post(f"/tasks/{uuid}/messages", json=message)).is_success
            message = {"role": "user", "content": f"b {round_}"}
            assert (await to_b.post(f"/tasks/{uuid}/messages", json=message)).is_success
        await asyncio.sleep(0.6)  # A's batches have run
        assert committed(servers.context_dir, uuid) == (21, 21)
        for client in (to_a, to_b):
            task = (await client.get(f"/tasks/{uuid}")).json()
            assert task["statistics"]["total_messages"] == 21
            assert task["context"]["last_seq"] == 21


async def test_with_no_flush_interval_each_append_moves_the_head_itself(
    servers: ServerPool,
) -> None:
    srv = servers.start(env={"HEAD_FLUSH_MS": "0"})
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        uuid = await new_task(http)
        for i in range(3):
            response = await http.post(f"/tasks/{uuid}/messages", json={"messages": turn(i)})
            assert response.status_code == 201, response.text
            assert committed(servers.context_dir, uuid) == (3 + 2 * i, 3 + 2 * i)


async def test_an_append_right_after_another_process_stopped_or_deleted_the_task_is_refused(
    servers: ServerPool,
) -> None:
    """A process answers appends close together from its copy of the task's row; another
    process's pause, resume and delete still hold at once (the task's directory says so)."""
    a, b = servers.start(), servers.start()
    async with (
        httpx.AsyncClient(base_url=a.base_url, timeout=30) as to_a,
        httpx.AsyncClient(base_url=b.base_url, timeout=30) as to_b,
    ):
        uuid = await new_task(to_a)
        path = f"/tasks/{uuid}/messages"
        note = {"role": "user", "content": "note"}
        for _ in range(3):
            assert (await to_a.post(path, json=note)).status_code == 201
        assert (await to_b.post(f"/tasks/{uuid}/stop")).status_code == 200
        refused = await to_a.post(path, json=note)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "task_not_writable"
        assert (await to_b.post(f"/tasks/{uuid}/resume")).status_code == 200
        assert (await to_a.post(path, json=note)).json()["seqs"] == [5]
        assert (await to_b.delete(f"/tasks/{uuid}")).status_code == 204
        gone = await to_a.post(path, json=note)
        assert gone.status_code == 404, gone.text
