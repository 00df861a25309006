"""Records built by hand the way a (crashed) writer left them, read back, and JSON requests
asserted on their status."""

from pathlib import Path
from typing import Any

import httpx
import orjson

from app.context.records import openai_message, request_hash
from app.storage.jsonl import dumps_line
from app.tokens.accounting import message_tokens
from app.tokens.counters import HeuristicCounter

TIMESTAMP = "2030-01-01T00:00:00.000000+00:00"


def records_of(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def build_batch(
    first_seq: int,
    messages: list[dict[str, Any]],
    *,
    idempotency_key: str | None = None,
    timestamp: str = TIMESTAMP,
) -> list[dict[str, Any]]:
    """The records app/context/records.py would write for ``messages`` (as posted), by hand.

    Tool results must already carry ``tool_name`` if the writer would have added it.
    """
    counter = HeuristicCounter()
    records = []
    for index, fields in enumerate(messages):
        record: dict[str, Any] = {"seq": first_seq + index, **fields, "timestamp": timestamp}
        record["tokens"] = message_tokens(counter, openai_message(record))
        if index == 0 and len(messages) > 1:
            record["batch_size"] = len(messages)
        if index == 0 and idempotency_key is not None:
            record["idempotency_key"] = idempotency_key
            record["request_hash"] = request_hash(messages)
        records.append(record)
    return records


def lines_of(records: list[dict[str, Any]]) -> bytes:
    return b"".join(dumps_line(r) for r in records)


def current_lines_of(records: list[dict[str, Any]]) -> bytes:
    return b"".join(dumps_line(openai_message(r)) for r in records)


def append_raw(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


async def get_json(client: httpx.AsyncClient, url: str) -> Any:
    response = await client.get(url)
    assert response.status_code == 200, response.text
    return response.json()


async def post_json(
    client: httpx.AsyncClient, url: str, body: Any, *, status: int = 201, **kwargs: Any
) -> Any:
    response = await client.post(url, json=body, **kwargs)
    assert response.status_code == status, response.text
    return response.json()
