"""A committed line damaged in the middle of messages.jsonl (bytes changed under the service,
not a torn tail): requests that must read it answer 500 `corrupt_record` in the one error
shape, never a history silently cut short; nothing is written by them; the task goes on
taking messages and serving its payload, and other tasks are untouched."""

from pathlib import Path

import httpx

from tests.api.helpers import assert_error, create_task, task_dir
from tests.conftest import snapshot_dir


async def _task_with_messages(client: httpx.AsyncClient, count: int) -> str:
    task_uuid: str = (await create_task(client, system_prompt="You are a coding agent."))["uuid"]
    for i in range(count):
        body = {"role": "user", "content": f"message number {i}"}
        assert (await client.post(f"/tasks/{task_uuid}/messages", json=body)).status_code == 201
    return task_uuid


def _damage_line(path: Path, index: int) -> None:
    """Overwrite one whole line with bytes that are not JSON (same length, newline kept)."""
    lines = path.read_bytes().split(b"\n")
    lines[index] = b"\x00" * len(lines[index])
    path.write_bytes(b"\n".join(lines))


async def test_a_damaged_history_line_is_reported_not_hidden(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    damaged = await _task_with_messages(client, 5)
    healthy = await _task_with_messages(client, 2)
    directory = task_dir(context_dir, damaged)
    _damage_line(directory / "messages.jsonl", 3)  # seq 4, in the committed middle

    assert_error(await client.get(f"/tasks/{damaged}/messages"), 500, "corrupt_record")
    # Pages before the damage still read.
    first = await client.get(f"/tasks/{damaged}/messages", params={"limit": 3})
    assert first.status_code == 200, first.text
    assert [m["seq"] for m in first.json()["messages"]] == [1, 2, 3]

    before = snapshot_dir(directory)
    response = await client.post(f"/tasks/{damaged}/compress", json={})
    assert_error(response, 500, "corrupt_record")
    assert snapshot_dir(directory) == before, "a refused compaction wrote nothing"

    # current.jsonl is intact: the payload still serves, and appends go on after seq 6.
    payload = await client.get(f"/tasks/{damaged}/request")
    assert payload.status_code == 200, payload.text
    assert [m["content"] for m in payload.json()["messages"]][-1] == "message number 4"
    appended = await client.post(
        f"/tasks/{damaged}/messages", json={"role": "user", "content": "after the damage"}
    )
    assert appended.status_code == 201, appended.text
    assert appended.json()["seqs"] == [7]

    history = await client.get(f"/tasks/{healthy}/messages")
    assert history.status_code == 200, history.text
    assert len(history.json()["messages"]) == 3
