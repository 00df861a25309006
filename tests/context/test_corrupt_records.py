"""Committed lines damaged in the middle of a file (bytes changed under the service, not a
torn tail). In messages.jsonl, the record of truth: requests that must read it answer 500
`corrupt_record` in the one error shape, never a history silently cut short; nothing is written
by them; the task goes on taking messages and serving its payload, other tasks are untouched.
In current.jsonl, derived from messages.jsonl: rebuilt before anything is served."""

from pathlib import Path

import httpx
import pytest

from tests.support.errors import assert_error
from tests.support.files import snapshot_dir, task_dir
from tests.support.tasks import new_task, post_messages, task_with_messages


def _damage_line(path: Path, index: int) -> None:
    """Overwrite one whole line with bytes that are not JSON (same length, newline kept)."""
    lines = path.read_bytes().split(b"\n")
    lines[index] = b"\x00" * len(lines[index])
    path.write_bytes(b"\n".join(lines))


async def test_a_damaged_history_line_is_reported_not_hidden(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    damaged = await task_with_messages(client, 5, "message number")
    healthy = await task_with_messages(client, 2, "message number")
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


FORMATS = ("openai", "lmstudio", "anthropic", "ollama")


async def test_a_damaged_current_line_is_rebuilt_not_served(
    client: httpx.AsyncClient, context_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """current.jsonl is derived from messages.jsonl: a damaged line in it is repaired before
    anything is served, in every format and in /context, and the file is as it was."""
    task_uuid = await task_with_messages(client, 5, "message number")
    current = task_dir(context_dir, task_uuid) / "current.jsonl"
    intact = current.read_bytes()
    contents = ["You are a coding agent.", *(f"message number {i}" for i in range(5))]
    for fmt in FORMATS:
        _damage_line(current, 2)
        response = await client.get(f"/tasks/{task_uuid}/request", params={"format": fmt})
        assert response.status_code == 200, response.text
        payload = response.json()  # whole, valid JSON
        assert "message number 4" in response.text
        assert current.read_bytes() == intact, fmt
        if fmt in ("openai", "lmstudio"):
            assert [m["content"] for m in payload["messages"]] == contents
    _damage_line(current, 2)
    view = await client.get(f"/tasks/{task_uuid}/context")
    assert view.status_code == 200, view.text
    assert current.read_bytes() == intact
    assert "current.jsonl is damaged" in caplog.text


async def test_damage_in_both_files_is_a_clear_error_before_any_byte(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    task_uuid = await task_with_messages(client, 5, "message number")
    directory = task_dir(context_dir, task_uuid)
    _damage_line(directory / "messages.jsonl", 3)
    _damage_line(directory / "current.jsonl", 3)
    for fmt in FORMATS:
        response = await client.get(f"/tasks/{task_uuid}/request", params={"format": fmt})
        assert_error(response, 500, "corrupt_record")
    assert_error(await client.get(f"/tasks/{task_uuid}/context"), 500, "corrupt_record")
    assert (await client.get("/readyz")).status_code == 200


async def test_a_damaged_current_line_past_the_first_read_is_rebuilt_too(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """A current.jsonl larger than one read (the first of which is taken as the file is
    opened): damage past that read is found before anything is served, and the whole payload
    streams as it was."""
    task_uuid = await new_task(client, context_length=2_000_000)
    contents = [f"part {i}: " + "lorem ipsum dolor " * 3000 for i in range(40)]  # ~2 MB
    for content in contents:
        await post_messages(client, task_uuid, {"role": "user", "content": content})
    current = task_dir(context_dir, task_uuid) / "current.jsonl"
    intact = current.read_bytes()
    assert len(intact) > 1024 * 1024
    _damage_line(current, 35)  # well past the first MiB
    response = await client.get(f"/tasks/{task_uuid}/request")
    assert response.status_code == 200, response.text
    assert [m["content"] for m in response.json()["messages"]][1:] == contents
    assert current.read_bytes() == intact


async def test_damage_made_after_a_payload_was_served_is_found_all_the_same(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """A payload remembers which first bytes of current.jsonl parsed (by their hash), so that
    the next parses only the lines appended since: bytes changed in place after it, length and
    all kept, in those first bytes or in the lines after them, are found before any byte."""
    task_uuid = await task_with_messages(client, 5, "message number")
    current = task_dir(context_dir, task_uuid) / "current.jsonl"
    for appended, damaged_line in (("appended", 2), ("appended again", -2)):
        served = await client.get(f"/tasks/{task_uuid}/request")
        assert served.status_code == 200, served.text
        await post_messages(client, task_uuid, {"role": "user", "content": appended})
        intact = current.read_bytes()
        _damage_line(current, damaged_line)  # -2: the line appended since that payload
        response = await client.get(f"/tasks/{task_uuid}/request")
        assert response.status_code == 200, response.text
        assert [m["content"] for m in response.json()["messages"]][-1] == appended
        assert current.read_bytes() == intact
