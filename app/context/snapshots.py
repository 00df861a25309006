"""A context file opened for a snapshot of its committed head: the blocking part of a read,
made on the event loop while it is quick (app.storage.file_work), else in a worker thread."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from app.context.checked import ParsedPrefixes
from app.context.files import MARKER, ContextFiles, read_metadata
from app.context.pending import ContextKey
from app.context.records import HeadState
from app.storage.file_work import NotQuick
from app.storage.jsonl import CHUNK, first_damaged_line, iter_lines, size_of

# The most of a current.jsonl a read on the event loop may parse (~0.15 ms at 0.4 GB/s); a
# context's first payload in a process, one after many appends, or one whose file was
# rewritten since (a compaction, another process) parses more, in a worker thread.
LOOP_PARSE_BYTES = 64 << 10


def open_snapshot_files(
    task_dir: Path, files: ContextFiles, file_name: str
) -> tuple[BinaryIO, dict[str, Any]]:
    metadata = read_metadata(task_dir)
    return open(files.messages if file_name == "messages" else files.current, "rb"), metadata


@dataclass
class Opened:
    """A context file opened for a snapshot of ``head``: the handle past ``prefetched``."""

    head: HeadState
    handle: BinaryIO
    metadata: dict[str, Any]
    prefetched: bytes
    taken: bool = False  # by a snapshot, which closes it then


def open_if_whole(
    task_dir: Path,
    files: ContextFiles,
    head: HeadState,
    file_name: str,
    parsed: ParsedPrefixes,
    context: ContextKey,
    *,
    quick: bool = False,
) -> Opened | None:
    """:func:`open_snapshot_files` when the files agree with ``head`` and every line of a
    current.jsonl to be served parses, with current.jsonl's first bytes (up to a read's
    chunk) read; None when they need the store's repair first. ``quick`` (on the event loop):
    NotQuick rather than parse more than LOOP_PARSE_BYTES (bytes rewritten since a payload
    found them whole) or a file larger than one read."""
    if not files.in_agreement_with(head):
        return None
    handle, metadata = open_snapshot_files(task_dir, files, file_name)
    try:
        if file_name != "current":
            return Opened(head, handle, metadata, b"")
        prefetched = handle.read(min(CHUNK, head.current_bytes))
        if len(prefetched) == head.current_bytes:
            max_parse = LOOP_PARSE_BYTES if quick else None
            damaged = parsed.first_damaged_line(context, prefetched, max_parse=max_parse)
        elif quick:
            raise NotQuick("a context larger than one read")
        else:
            damaged = first_damaged_line(files.current, head.current_bytes)
        if damaged is not None:
            handle.close()
            return None
        return Opened(head, handle, metadata, prefetched)
    except BaseException:
        handle.close()
        raise


def holds_committed(files: ContextFiles, head: HeadState) -> bool:
    """Whether the files still hold the committed view of ``head``: neither is shorter, and no
    marker lies past it in messages.jsonl (its repair rewrites current.jsonl rather than
    appending to it, so current.jsonl's first bytes may no longer be the committed ones)."""
    if size_of(files.messages) < head.messages_bytes or size_of(files.current) < head.current_bytes:
        return False
    return not any(MARKER in line for _, line in iter_lines(files.messages, head.messages_bytes))
