"""SPEC §3.2 and §3.6 for a thread's own files: current.jsonl is rebuilt from messages.jsonl
when missing or damaged, and a torn last line is cut, never a reason to lose the thread."""

from pathlib import Path

import httpx

from app.config import Settings
from tests.support.app import running_app
from tests.support.files import read_jsonl, task_dir
from tests.support.tasks import create_task
from tests.support.threads import start

TURNS = [
    {"role": "user", "content": "Write the parser."},
    {"role": "assistant", "content": "Parser written; tests pass."},
    {"role": "user", "content": "Now the printer."},
]


async def thread_with_messages(client: httpx.AsyncClient) -> tuple[str, int]:
    uuid = (await create_task(client))["uuid"]
    root = {"role": "user", "content": "Delegate the parser to a sub-agent."}
    assert (await client.post(f"/tasks/{uuid}/messages", json=root)).status_code == 201
    thread_id = (await start(client, uuid, label="parser"))["thread_id"]
    response = await client.post(
        f"/tasks/{uuid}/messages", params={"thread_id": thread_id}, json={"messages": TURNS}
    )
    assert response.status_code == 201, response.text
    return uuid, thread_id


async def payload(client: httpx.AsyncClient, uuid: str, thread_id: int) -> bytes:
    response = await client.get(f"/tasks/{uuid}/request", params={"thread_id": thread_id})
    assert response.status_code == 200, response.text
    return response.content


async def test_a_lost_or_damaged_current_jsonl_of_a_thread_is_rebuilt(
    settings: Settings, context_dir: Path
) -> None:
    async with running_app(settings) as client:
        uuid, thread_id = await thread_with_messages(client)
        before = await payload(client, uuid, thread_id)
        current = task_dir(context_dir, uuid) / "threads" / str(thread_id) / "current.jsonl"
        original = current.read_bytes()
        current.unlink()
        assert await payload(client, uuid, thread_id) == before
        assert current.read_bytes() == original
        current.write_bytes(original[: len(original) // 2])  # damaged: shorter than its head
        assert await payload(client, uuid, thread_id) == before
        assert current.read_bytes() == original


async def test_a_torn_last_line_of_a_thread_is_cut_and_the_thread_goes_on(
    settings: Settings, context_dir: Path
) -> None:
    async with running_app(settings) as client:
        uuid, thread_id = await thread_with_messages(client)
        before = await payload(client, uuid, thread_id)
    messages = task_dir(context_dir, uuid) / "threads" / str(thread_id) / "messages.jsonl"
    acknowledged = messages.read_bytes()
    # A kill -9 in the middle of the next append (the app is stopped: nothing else runs).
    messages.write_bytes(acknowledged + b'{"seq": 4, "role": "user", "content": "half a li')
    async with running_app(settings) as client:
        assert await payload(client, uuid, thread_id) == before
        assert messages.read_bytes() == acknowledged  # the torn bytes were cut
        more = {"role": "assistant", "content": "Printer written."}
        response = await client.post(
            f"/tasks/{uuid}/messages", params={"thread_id": thread_id}, json=more
        )
        assert response.status_code == 201, response.text
        assert response.json()["seqs"] == [len(TURNS) + 1]
    assert [r["seq"] for r in read_jsonl(messages)] == list(range(1, len(TURNS) + 2))
