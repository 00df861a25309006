"""A context indexed for planning a compaction: its visible records as plan entries, read from
messages.jsonl (blocking; in a worker thread or one of the service's CPU processes, which is
why what it needs comes as plain data)."""

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from app.compaction.plans import Entry
from app.context.files import visible_records


@dataclass(frozen=True)
class ToIndex:
    path: Path  # messages.jsonl
    end: int  # its committed bytes
    fmt: str  # the format whose tokens the entries carry


def entries_of(f: BinaryIO, end: int, fmt: str) -> list[Entry]:
    """The entries of an open messages.jsonl up to ``end``, tokens as ``fmt`` renders them."""
    return [Entry.of(record, fmt) for record in visible_records(f, end)]


def entries_at(job: ToIndex) -> list[Entry]:
    """:func:`entries_of` messages.jsonl as its path finds it."""
    with open(job.path, "rb") as f:
        return entries_of(f, job.end, job.fmt)
