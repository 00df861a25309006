"""A context indexed for planning a compaction: its visible records as plan entries, read from
messages.jsonl (blocking; in a worker thread or one of the service's CPU processes, which is
why what it needs comes as plain data)."""

import asyncio
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from app.compaction.plans import Entry
from app.context.files import visible_records

# A process sends its entries back pickled in chunks of this many. Unpickled at once, a
# 5,000-message context's held the interpreter ~5 ms (one call, no switch to the event loop
# in it), and every request of the service waited; a chunk takes ~0.25 ms.
PICKLED_CHUNK = 256


@dataclass(frozen=True)
class ToIndex:
    path: Path  # messages.jsonl
    end: int  # its committed bytes
    fmt: str  # the format whose tokens the entries carry


def entries_of(f: BinaryIO, end: int, fmt: str) -> list[Entry]:
    """The entries of an open messages.jsonl up to ``end``, tokens as ``fmt`` renders them."""
    return [Entry.of(record, fmt) for record in visible_records(f, end)]


@dataclass(frozen=True)
class PickledEntries:
    """Entries as a process sends them back: pickled chunks, for :func:`unpickled`."""

    chunks: list[bytes]


def entries_at(job: ToIndex) -> PickledEntries:
    """:func:`entries_of` messages.jsonl as its path finds it, pickled in chunks."""
    with open(job.path, "rb") as f:
        entries = entries_of(f, job.end, job.fmt)
    return PickledEntries(
        [
            pickle.dumps(entries[start : start + PICKLED_CHUNK], pickle.HIGHEST_PROTOCOL)
            for start in range(0, len(entries), PICKLED_CHUNK)
        ]
    )


async def unpickled(found: list[Entry] | PickledEntries) -> list[Entry]:
    """The entries, unpickled (if from a process) a chunk at a time, the event loop free to
    serve requests between chunks."""
    if not isinstance(found, PickledEntries):
        return found
    entries: list[Entry] = []
    for number, chunk in enumerate(found.chunks):
        if number:
            await asyncio.sleep(0)
        entries += pickle.loads(chunk)
    return entries
