"""A context's files and their crash recovery. Blocking: run in a worker thread, under the
task lock.

The committed head (a DB row) says how many bytes of ``messages.jsonl`` and ``current.jsonl``
are acknowledged. After a crash the files can be longer (records fsynced but not committed,
or a torn line) or ``current.jsonl`` can be missing or short. :func:`recover` brings files and
head back into agreement, treating ``messages.jsonl`` as the record of truth.
"""

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from app.context.records import (
    ContextAccumulator,
    HeadState,
    IdempotentResult,
    StatsDelta,
    current_line,
)
from app.storage.jsonl import append_bytes, iter_lines, size_of, truncate, write_atomic
from app.storage.layout import CURRENT, MESSAGES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContextFiles:
    directory: Path

    @property
    def messages(self) -> Path:
        return self.directory / MESSAGES

    @property
    def current(self) -> Path:
        return self.directory / CURRENT

    def in_agreement_with(self, head: HeadState) -> bool:
        return (
            size_of(self.messages) == head.messages_bytes
            and size_of(self.current) == head.current_bytes
        )


@dataclass
class Recovery:
    head: HeadState
    stats: StatsDelta = field(default_factory=StatsDelta)
    # True when the history had to be re-read from the start: stats are totals, not deltas.
    stats_are_totals: bool = False
    idempotent_results: list[IdempotentResult] = field(default_factory=list)
    changed: bool = False


def recover(files: ContextFiles, head: HeadState, *, fsync: bool, context: str) -> Recovery:
    if files.in_agreement_with(head):
        return Recovery(head=head)
    messages_size = max(size_of(files.messages), 0)
    from_scratch = messages_size < head.messages_bytes
    if from_scratch:
        log.error(
            "%s: messages.jsonl is shorter than its committed head (%d < %d bytes): rebuilding "
            "the context from what remains",
            context,
            messages_size,
            head.messages_bytes,
        )
    base = HeadState() if from_scratch else head
    accumulator = ContextAccumulator(base)
    results, lines = _catch_up(
        files, accumulator, head.messages_bytes, fsync=fsync, context=context
    )

    current_size = size_of(files.current)
    if not from_scratch and current_size >= base.current_bytes:
        if current_size > base.current_bytes:
            truncate(files.current, base.current_bytes, fsync=fsync)
        append_bytes(files.current, b"".join(lines), fsync=fsync)
    else:
        log.warning("%s: current.jsonl is missing or short: rebuilding it", context)
        written = write_atomic(
            files.current, current_lines(files, accumulator.head.messages_bytes), fsync=fsync
        )
        if written != accumulator.head.current_bytes:  # cannot happen unless code changed
            raise RuntimeError(f"{context}: rebuilt current.jsonl has {written} bytes")
    if not from_scratch and accumulator.head.last_seq != base.last_seq:
        log.warning(
            "%s: recovered messages %d..%d that were written but not committed",
            context,
            base.last_seq + 1,
            accumulator.head.last_seq,
        )
    return Recovery(
        head=accumulator.head,
        stats=accumulator.stats,
        stats_are_totals=from_scratch,
        idempotent_results=results,
        changed=True,
    )


def _catch_up(
    files: ContextFiles,
    accumulator: ContextAccumulator,
    committed: int,
    *,
    fsync: bool,
    context: str,
) -> tuple[list[IdempotentResult], list[bytes]]:
    """Admit the whole batches past the head; cut everything from the first bad record."""
    results: list[IdempotentResult] = []
    lines: list[bytes] = []
    batches = _read_batches(files, accumulator.head, committed, fsync=fsync, context=context)
    for batch in batches:
        for record, record_line in batch:
            lines.append(accumulator.admit(record, record_line))
        first = batch[0][0]
        if "idempotency_key" in first and len(batch) == first.get("batch_size", 1):
            response = append_response([r for r, _ in batch], accumulator.head.context_tokens)
            results.append(
                IdempotentResult(first["idempotency_key"], first["request_hash"], response)
            )
    return results, lines


Batch = list[tuple[dict[str, Any], bytes]]


def _read_batches(
    files: ContextFiles, head: HeadState, committed: int, *, fsync: bool, context: str
) -> list[Batch]:
    """The records after the head, in batches; everything from the first bad line is cut.

    Past the ``committed`` byte count nothing was acknowledged, and a batch is acknowledged
    whole or not at all: there, a batch whose tail was lost is cut too. Below it (bytes lost
    from a damaged file), every surviving record was acknowledged and is kept.
    """
    batches: list[Batch] = []
    batch: Batch = []
    kept = 0  # records of the unfinished batch that lie below `committed`
    remaining = 0
    expected_seq = head.last_seq + 1
    end = head.messages_bytes
    for offset, line in iter_lines(files.messages, head.messages_bytes):
        try:
            record = orjson.loads(line)
            valid = isinstance(record, dict) and record.get("seq") == expected_seq
        except orjson.JSONDecodeError:
            valid = False
        if valid and remaining == 0:
            batch, remaining = [], int(record.get("batch_size", 1))
        elif valid and "batch_size" in record:
            valid = False  # a new batch inside an unfinished one
        if not valid:
            break
        batch.append((record, line + b"\n"))
        remaining -= 1
        expected_seq += 1
        line_end = offset + len(line) + 1
        if remaining == 0:
            batches.append(batch)
            batch, kept, end = [], 0, line_end
        elif line_end <= committed:
            kept, end = len(batch), line_end
    if kept:
        batches.append(batch[:kept])
    size = max(size_of(files.messages), 0)
    if end != size:
        log.warning("%s: cut %d torn bytes from messages.jsonl", context, size - end)
        truncate(files.messages, end, fsync=fsync)
    return batches


def append_response(records: list[dict[str, Any]], context_tokens: int) -> dict[str, Any]:
    return {
        "seqs": [r["seq"] for r in records],
        "tokens": [r["tokens"] for r in records],
        "context_tokens": context_tokens,
        "compaction_scheduled": False,
    }


def current_lines(files: ContextFiles, end: int) -> Iterator[bytes]:
    """The current.jsonl that messages.jsonl[0:end] implies, in chunks."""
    buffer: list[bytes] = []
    size = 0
    for _, line in iter_lines(files.messages, 0, end):
        out = current_line(orjson.loads(line))
        buffer.append(out)
        size += len(out)
        if size >= 1 << 20:
            yield b"".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield b"".join(buffer)


def write_group(
    files: ContextFiles, record_lines: list[bytes], current: list[bytes], *, fsync: bool
) -> None:
    """Append a group's records, then their current lines; one write and fsync per file."""
    append_bytes(files.messages, b"".join(record_lines), fsync=fsync)
    append_bytes(files.current, b"".join(current), fsync=fsync)
