"""Every corpus trajectory goes in through the API and comes out unchanged.

Each file is replayed twice, into a fresh task each time: in batches of up to 50 messages, and one
message per POST. Afterwards the payload (GET /request), the history (GET /messages, paged) and the
statistics (GET /tasks/{uuid}) must agree with the file exactly: messages in order and unchanged,
including the corpus's odd corners (assistant content "" with tool_calls, empty tool results, two
system messages, consecutive same-role messages, an unanswered final tool call, duplicate ids).
"""

from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from tests.support.corpus import CORPUS_FILES, corpus_messages
from tests.support.schemas import validate_openai_request
from tests.support.tasks import task_body

pytestmark = pytest.mark.database_agnostic

WINDOW = 2_000_000
MAX_OUTPUT = 8192
BUDGET = int(WINDOW * 0.9) - MAX_OUTPUT  # CONTEXT_BUFFER 0.1
BATCH = 50
PAGE = 250
# Fields the service adds to a messages.jsonl record around the message as posted.
ENVELOPE = {"seq", "timestamp", "tokens", "format_tokens", "batch_size"}


@pytest.fixture
def settings(request: pytest.FixtureRequest, context_dir: Path) -> Settings:
    """Default settings; a test may pick ``fsync`` by indirect parametrization.

    The one-by-one replay makes 2816 POSTs, each fsynced (messages.jsonl and current.jsonl).
    Measured on this (shared, 2-CPU) machine, that variant alone took 58-97 s with fsync "always"
    and 34-63 s with "never", which would put this file well over 60 s; so it runs with "never".
    The batch replay keeps the default "always": the durable write path still sees the corpus.

    No message cap: a single tool output of 1.3M characters would be over a fifth of even this
    window's budget, and cut as it is appended (tests/compaction/test_message_cap.py); here
    every message must come out of the payload as it went in.
    """
    fsync = getattr(request, "param", "always")
    return Settings(
        context_dir=context_dir,
        storage={"fsync": fsync},
        compaction={"max_message_share": 1.0},
    )


def tool_call_names(messages: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Tool call id -> the function names called under that id (ids may repeat)."""
    names: dict[str, set[str]] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            names.setdefault(call["id"], set()).add(call["function"]["name"])
    return names


async def create_task(client: httpx.AsyncClient) -> str:
    response = await client.post(
        "/tasks", json=task_body(context_length=WINDOW, max_output_tokens=MAX_OUTPUT)
    )
    assert response.status_code == 201, response.text
    uuid: str = response.json()["uuid"]
    return uuid


async def post(client: httpx.AsyncClient, uuid: str, body: dict[str, Any], first: int) -> None:
    """POST one body of ``n`` messages and check it got seqs first..first+n-1."""
    count = len(body["messages"]) if "messages" in body else 1
    response = await client.post(f"/tasks/{uuid}/messages", json=body)
    assert response.status_code == 201, response.text[:2000]
    result = response.json()
    assert result["seqs"] == list(range(first, first + count))
    assert len(result["tokens"]) == count
    assert all(isinstance(t, int) and t >= 0 for t in result["tokens"])


async def read_history(client: httpx.AsyncClient, uuid: str) -> list[dict[str, Any]]:
    """All of GET /messages, following next_after_seq until it is null."""
    records: list[dict[str, Any]] = []
    after = 0
    for _ in range(10_000):  # bounded: far more pages than any corpus file needs
        response = await client.get(
            f"/tasks/{uuid}/messages", params={"after_seq": after, "limit": PAGE}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        records.extend(page["messages"])
        if page["next_after_seq"] is None:
            return records
        assert page["next_after_seq"] == page["messages"][-1]["seq"]
        after = page["next_after_seq"]
    raise AssertionError("GET /messages never reached the last page")


async def check_replayed(
    client: httpx.AsyncClient, uuid: str, messages: list[dict[str, Any]], batch_starts: set[int]
) -> None:
    """Payload, history and statistics all hold exactly ``messages``.

    ``batch_starts`` holds the seq of each multi-message batch's first record (which alone
    carries ``batch_size``).
    """
    count = len(messages)

    response = await client.get(f"/tasks/{uuid}/request")
    assert response.status_code == 200, response.text[:2000]
    payload = response.json()
    assert payload["model"] == "gpt-4o"
    assert payload["max_completion_tokens"] == MAX_OUTPUT
    assert len(payload["messages"]) == count
    for index, (got, sent) in enumerate(zip(payload["messages"], messages, strict=True)):
        assert got == sent, f"payload message {index} differs from what was posted"
    validate_openai_request(payload)
    tokens = int(response.headers["X-Context-Tokens"])
    assert int(response.headers["X-Context-Budget"]) == BUDGET
    assert 0 < tokens <= BUDGET

    records = await read_history(client, uuid)
    assert [r["seq"] for r in records] == list(range(1, count + 1))
    names = tool_call_names(messages)
    for index, (record, sent) in enumerate(zip(records, messages, strict=True)):
        assert isinstance(record["tokens"], int)
        assert isinstance(record["timestamp"], str)
        assert ("batch_size" in record) == (record["seq"] in batch_starts)
        message = {k: v for k, v in record.items() if k not in ENVELOPE}
        if sent["role"] == "tool":
            # The service notes which tool the result answers (the seeds' tool_name).
            assert message.pop("tool_name") in names[sent["tool_call_id"]]
        assert message == sent, f"history record {index} differs from what was posted"

    response = await client.get(f"/tasks/{uuid}")
    assert response.status_code == 200
    task = response.json()
    assert task["statistics"]["total_messages"] == count
    assert task["statistics"]["tool_call_count"] == sum(
        len(m.get("tool_calls") or ()) for m in messages
    )
    assert task["statistics"]["llm_call_count"] == 0  # the corpus reports no usage
    assert task["context"]["last_seq"] == count
    assert task["context"]["messages"] == count
    assert task["context"]["tokens"] == tokens


def test_corpus_is_complete() -> None:
    """The parametrization below covers the whole corpus (37 files, 2816 messages)."""
    assert len(CORPUS_FILES) == 37
    assert sum(len(corpus_messages(name)) for name in CORPUS_FILES) == 2816


def test_corpus_has_the_corner_cases() -> None:
    """The replays below really pass the corpus's odd corners through (they are all present)."""
    files = {name: corpus_messages(name) for name in CORPUS_FILES}
    every = [m for messages in files.values() for m in messages]
    assert any(sum(m["role"] == "system" for m in ms) == 2 for ms in files.values())
    assert any(
        m["role"] == "assistant" and m["content"] == "" and m.get("tool_calls") for m in every
    )
    assert any(m["role"] == "tool" and m["content"] == "" for m in every)
    assert any(a["role"] == b["role"] != "tool" for ms in files.values() for a, b in pairwise(ms))
    assert sum(bool(ms[-1].get("tool_calls")) for ms in files.values()) == 11
    ids = [
        call["id"]
        for m in files["swe-agent__marshmallow-1867_function_calling_replace.jsonl"]
        for call in m.get("tool_calls") or ()
    ]
    assert len(ids) > len(set(ids))


@pytest.mark.parametrize("name", CORPUS_FILES)
async def test_replay_in_batches(client: httpx.AsyncClient, name: str) -> None:
    """A file posted in batches of up to 50 messages comes back unchanged."""
    messages = corpus_messages(name)
    uuid = await create_task(client)
    batch_starts = set()
    for start in range(0, len(messages), BATCH):
        chunk = messages[start : start + BATCH]
        await post(client, uuid, {"messages": chunk}, start + 1)
        if len(chunk) > 1:
            batch_starts.add(start + 1)
    await check_replayed(client, uuid, messages, batch_starts)


@pytest.mark.parametrize("settings", ["never"], indirect=True)
@pytest.mark.parametrize("name", CORPUS_FILES)
async def test_replay_one_by_one(client: httpx.AsyncClient, name: str) -> None:
    """A file posted one message per POST comes back unchanged."""
    messages = corpus_messages(name)
    uuid = await create_task(client)
    for index, message in enumerate(messages):
        await post(client, uuid, message, index + 1)
    await check_replayed(client, uuid, messages, set())
