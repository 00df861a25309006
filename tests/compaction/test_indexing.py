"""A context indexed in another process comes back pickled in chunks, unpickled one chunk at a
time with the event loop free in between: the same entries as indexed here."""

import asyncio
import math
from pathlib import Path

import httpx

from app.compaction.indexing import PICKLED_CHUNK, ToIndex, entries_at, entries_of, unpickled
from tests.support.conversations import turns
from tests.support.files import task_dir
from tests.support.tasks import append, new_task


async def test_chunks_unpickle_to_the_entries_indexed_here_the_loop_running_between(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    uuid = await new_task(client)
    await append(client, uuid, *turns(2 * PICKLED_CHUNK + 100, words=20))
    messages = task_dir(context_dir, uuid) / "messages.jsonl"
    end = messages.stat().st_size
    with messages.open("rb") as f:
        here = entries_of(f, end, "anthropic")

    indexed = entries_at(ToIndex(messages, end, "anthropic"))

    assert len(indexed.chunks) == math.ceil(len(here) / PICKLED_CHUNK) >= 3
    turns_of_the_loop = 0

    async def counting() -> None:
        nonlocal turns_of_the_loop
        while True:
            turns_of_the_loop += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(counting())
    await asyncio.sleep(0)
    before = turns_of_the_loop
    assert await unpickled(indexed) == here
    counter.cancel()
    assert turns_of_the_loop - before >= len(indexed.chunks) - 1


async def test_entries_indexed_in_this_process_are_taken_as_they_are(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    uuid = await new_task(client)
    await append(client, uuid, *turns(4))
    messages = task_dir(context_dir, uuid) / "messages.jsonl"
    with messages.open("rb") as f:
        here = entries_of(f, messages.stat().st_size, "openai")
    assert await unpickled(here) is here
