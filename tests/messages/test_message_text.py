"""GET /tasks/{uuid}/messages/{seq}: a range of one message's text as posted, capped in bytes,
paged with next_start; what the handles of masked and elided spans point at."""

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from tests.support.errors import assert_error
from tests.support.tasks import append, new_task
from tests.support.threads import start
from tests.support.unchanged import assert_unchanged, state

# 3 bytes each in UTF-8, so a byte cap that splits one must leave it out whole.
OUTPUT = "".join(f"line {i:03d}: ok €\n" for i in range(200))


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(context_dir=context_dir, token_counter="heuristic")


def read_turn(output: str) -> list[dict[str, Any]]:
    """A read_file call and its output."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": "{}"},
    }
    return [
        {"role": "user", "content": "Read the log."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": output, "tool_name": "read_file"},
    ]


async def text_of(client: httpx.AsyncClient, uuid: str, seq: int, **params: Any) -> dict[str, Any]:
    response = await client.get(f"/tasks/{uuid}/messages/{seq}", params=params)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def test_a_whole_message_by_its_seq(client: httpx.AsyncClient) -> None:
    uuid = await new_task(client)
    seqs = await append(client, uuid, *read_turn(OUTPUT))

    answer = await text_of(client, uuid, seqs[2])

    assert answer == {
        "seq": seqs[2],
        "role": "tool",
        "tool_call_id": "call_1",
        "tool_name": "read_file",
        "marker": None,
        "tool_calls": None,
        "text": OUTPUT,
        "total_chars": len(OUTPUT),
        "start": 0,
        "end": len(OUTPUT),
        "cut": False,
        "next_start": None,
    }


async def test_a_call_comes_with_its_tool_calls_whole(client: httpx.AsyncClient) -> None:
    """An assistant turn that only calls tools has no text; its calls come as posted."""
    uuid = await new_task(client)
    seqs = await append(client, uuid, *read_turn(OUTPUT))

    answer = await text_of(client, uuid, seqs[1])

    assert (answer["text"], answer["total_chars"], answer["next_start"]) == ("", 0, None)
    assert answer["tool_calls"] == read_turn(OUTPUT)[1]["tool_calls"]


async def test_a_range_is_characters_start_to_end(client: httpx.AsyncClient) -> None:
    """start inclusive, end exclusive; an end past the text stops at its end."""
    uuid = await new_task(client)
    seqs = await append(client, uuid, *read_turn(OUTPUT))

    middle = await text_of(client, uuid, seqs[2], start=100, end=250)
    past = await text_of(client, uuid, seqs[2], start=len(OUTPUT) - 5, end=10**9)

    assert middle["text"] == OUTPUT[100:250]
    assert (middle["start"], middle["end"], middle["cut"], middle["next_start"]) == (
        100,
        250,
        False,
        None,
    )
    assert past["text"] == OUTPUT[-5:]
    assert past["end"] == len(OUTPUT)


async def test_a_byte_cap_pages_through_the_text(client: httpx.AsyncClient) -> None:
    """max_bytes cuts the answer on a character boundary and next_start continues it; the
    pages put together are the range asked for."""
    uuid = await new_task(client)
    seqs = await append(client, uuid, *read_turn(OUTPUT))
    end = len(OUTPUT) - 40
    pages: list[dict[str, Any]] = []
    position: int | None = 10
    while position is not None:
        page = await text_of(client, uuid, seqs[2], start=position, end=end, max_bytes=500)
        assert len(page["text"].encode()) <= 500
        pages.append(page)
        position = page["next_start"]

    assert "".join(p["text"] for p in pages) == OUTPUT[10:end]
    assert all(p["cut"] for p in pages[:-1])
    assert not pages[-1]["cut"]
    assert [p["start"] for p in pages[1:]] == [p["end"] for p in pages[:-1]]
    assert len(pages) > 1


async def test_a_message_with_parts_reads_as_its_text(client: httpx.AsyncClient) -> None:
    """A content of parts is its texts joined by newlines, as elision measures it."""
    uuid = await new_task(client)
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    [seq] = await append(client, uuid, {"role": "user", "content": parts})

    answer = await text_of(client, uuid, seq)

    assert answer["text"] == "first\nsecond"
    assert answer["role"] == "user"
    assert answer["tool_call_id"] is None


async def test_a_thread_has_its_own_seqs(client: httpx.AsyncClient) -> None:
    uuid = await new_task(client)
    await append(client, uuid, {"role": "user", "content": "root question"})
    thread = await start(client, uuid, label="look")
    [seq] = await append(
        client, uuid, {"role": "user", "content": "thread question"}, thread_id=thread["thread_id"]
    )

    inside = await text_of(client, uuid, seq, thread_id=thread["thread_id"])
    root = await text_of(client, uuid, seq)

    assert inside["text"] == "thread question"
    assert root["text"] != "thread question"


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        ("/messages/99", {}, 404, "message_not_found"),
        ("/messages/4", {"start": 5, "end": 4}, 422, "invalid_range"),
        ("/messages/4", {"start": 10**6}, 422, "invalid_range"),
        ("/messages/4", {"start": -1}, 422, "validation_error"),
        ("/messages/4", {"max_bytes": 0}, 422, "validation_error"),
        ("/messages/4", {"max_bytes": 10**7}, 422, "validation_error"),
        ("/messages/0", {}, 422, "validation_error"),
        ("/messages/4", {"thread_id": 7}, 404, "thread_not_found"),
    ],
)
async def test_bad_requests_are_refused_and_change_nothing(
    client: httpx.AsyncClient,
    context_dir: Path,
    path: str,
    params: dict[str, Any],
    status: int,
    code: str,
) -> None:
    uuid = await new_task(client)
    await append(client, uuid, *read_turn("short output"))
    before = await state(client, context_dir, uuid)

    response = await client.get(f"/tasks/{uuid}{path}", params=params)

    details = assert_error(response, status, code)
    if code == "message_not_found":
        assert details == {"uuid": uuid, "thread_id": 0, "seq": 99, "last_seq": 4}
    if code == "invalid_range":
        assert details["total_chars"] == len("short output")
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_an_unknown_task_is_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/tasks/00000000-0000-4000-8000-000000000000/messages/1")
    assert_error(response, 404, "task_not_found")
