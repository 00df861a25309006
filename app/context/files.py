"""A context's files and their crash recovery. Blocking: run in a worker thread (or, for an
append's small write, on the event loop: app.storage.file_work), under the task lock.

The committed head (a DB row) says how many bytes of ``messages.jsonl`` and ``current.jsonl``
are acknowledged. After a crash the files can be longer (records fsynced but not committed,
or a torn line) or ``current.jsonl`` can be missing or short. :func:`recover` brings files and
head back into agreement, treating ``messages.jsonl`` as the record of truth.
"""

import logging
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from app.context import effective
from app.context.effective import MARKER_TYPE, is_marker
from app.context.records import (
    ContextAccumulator,
    HeadState,
    IdempotentResult,
    StatsDelta,
    advance_tool_calls,
    count_record,
    current_line,
)
from app.context.shapes import Marker, SummaryRecord
from app.errors import ContextFilesDamaged, TaskMetadataMissing
from app.storage.jsonl import (
    append_bytes,
    dumps_line,
    fsync_dir,
    iter_lines,
    iter_lines_backward,
    last_record,
    offset_after_seq,
    repair_tail,
    size_of,
    truncate,
    write_atomic,
)
from app.storage.layout import CURRENT, MESSAGES, METADATA, SUMMARIES

log = logging.getLogger(__name__)

MARKER = b'"marker":'  # cheap pre-filter: only lines holding it can be marker records


@dataclass(frozen=True)
class ContextFiles:
    directory: Path

    @cached_property
    def messages(self) -> Path:
        return self.directory / MESSAGES

    @cached_property
    def current(self) -> Path:
        return self.directory / CURRENT

    def summary_backend(self) -> str | None:
        """The summary backend the task chose at creation (metadata.json), if any."""
        choice: str | None = read_metadata(self.directory).get("summary_backend")
        return choice

    def in_agreement_with(self, head: HeadState) -> bool:
        return (
            size_of(self.messages) == head.messages_bytes
            and size_of(self.current) == head.current_bytes
        )


def read_metadata(task_dir: Path) -> dict[str, Any]:
    """The task's metadata.json; TaskMetadataMissing when it is gone."""
    try:
        metadata: dict[str, Any] = orjson.loads((task_dir / METADATA).read_bytes())
    except FileNotFoundError:
        raise TaskMetadataMissing(task_dir.name) from None
    return metadata


def require_metadata(task_dir: Path) -> None:
    """TaskMetadataMissing unless the task's metadata.json is there: a context that could
    never be served again takes no more messages."""
    if not (task_dir / METADATA).is_file():
        raise TaskMetadataMissing(task_dir.name)


@dataclass
class Recovery:
    head: HeadState
    stats: StatsDelta = field(default_factory=StatsDelta)
    # True when the history was re-read from the start (an operator's repair): stats are
    # totals, not deltas.
    stats_are_totals: bool = False
    idempotent_results: list[IdempotentResult] = field(default_factory=list)
    changed: bool = False


def recover(files: ContextFiles, head: HeadState, *, fsync: bool, where: "Where") -> Recovery:
    if files.in_agreement_with(head):
        return Recovery(head=head)
    messages_size = max(size_of(files.messages), 0)
    if messages_size < head.messages_bytes:  # acknowledged bytes lost: never reissue their seqs
        raise ContextFilesDamaged(where.task_uuid, where.thread_id, damage(files, head))
    context = str(where)
    batches = _read_batches(files, head, fsync=fsync, context=context)
    records = [record for batch in batches for record, _ in batch]
    if records:
        log.warning(
            "%s: recovered messages %d..%d that were written but not committed",
            context,
            records[0]["seq"],
            records[-1]["seq"],
        )
    current_size = size_of(files.current)
    if current_size < head.current_bytes or any(map(is_marker, records)):
        if current_size < head.current_bytes:
            log.warning("%s: current.jsonl is missing or short: rebuilding it", context)
        new_head, _ = rebuild(files, fsync=fsync)
        results = _idempotent_results(batches, new_head.context_tokens)
        return Recovery(new_head, _stats_of(records), False, results, changed=True)
    accumulator = ContextAccumulator(head)
    lines: list[bytes] = []
    results = []
    for batch in batches:
        lines += [accumulator.admit(record, line) for record, line in batch]
        results += _idempotent_results([batch], accumulator.head.context_tokens)
    if current_size > head.current_bytes:
        truncate(files.current, head.current_bytes, fsync=fsync)
    append_bytes(files.current, b"".join(lines), fsync=fsync)
    return Recovery(accumulator.head, accumulator.stats, False, results, changed=True)


@dataclass(frozen=True)
class Where:
    """Which context a repair is about, for errors and logs."""

    task_uuid: str
    thread_id: int

    def __str__(self) -> str:
        return f"task {self.task_uuid} thread {self.thread_id}"


def damage(files: ContextFiles, head: HeadState) -> dict[str, Any]:
    """What a messages.jsonl shorter than its committed head has lost."""
    intact = last_intact_seq(files.messages)
    return {
        "file": MESSAGES,
        "committed_bytes": head.messages_bytes,
        "found_bytes": max(size_of(files.messages), 0),
        "committed_last_seq": head.last_seq,
        "missing_seqs": [intact + 1, head.last_seq],
    }


def last_intact_seq(path: Path) -> int:
    """The seq of the last whole record of a file (0 if none): its tail may be torn."""
    if size_of(path) <= 0:
        return 0
    with open(path, "rb") as f:
        for line in iter_lines_backward(f, size_of(path)):
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("seq"), int):
                return int(record["seq"])
    return 0


def accept_loss(
    files: ContextFiles, head: HeadState, timestamp: str, *, fsync: bool, where: Where
) -> tuple[HeadState, StatsDelta, list[int]] | None:
    """An operator's repair of a damaged messages.jsonl: cut its torn tail, record the lost
    seqs in a ``lost`` marker that takes the last of them (so no seq is issued twice), and
    rebuild current.jsonl from what remains. None when the file was not damaged."""
    if max(size_of(files.messages), 0) >= head.messages_bytes:
        return None
    lost = damage(files, head)["missing_seqs"]
    repair_tail(files.messages, fsync=fsync, context=str(where))
    marker: Marker = {
        "seq": head.last_seq,
        "type": MARKER_TYPE,
        "marker": "lost",
        "lost": lost,
        "timestamp": timestamp,
        "tokens": 0,
    }
    append_bytes(files.messages, dumps_line(marker), fsync=fsync)
    log.error("%s: accepted the loss of seqs %d..%d", where, lost[0], lost[1])
    new_head, totals = rebuild(files, fsync=fsync)
    return new_head, totals, lost


def rebuild(files: ContextFiles, *, fsync: bool) -> tuple[HeadState, StatsDelta]:
    """Write current.jsonl anew from messages.jsonl alone; return the head and the totals."""
    render = CurrentRender(files)
    write_atomic(files.current, iter(render), fsync=fsync)
    return render.head, render.totals


def _rendered_lines(
    records: Iterable[dict[str, Any]], active: effective.Plan, head: HeadState
) -> Iterator[bytes]:
    """The current.jsonl lines of the visible records, ``head`` moved past each."""
    for record in effective.visible(records, active):
        line = current_line(record)
        head.current_bytes += len(line)
        head.current_messages += 1
        head.add_tokens(record)
        advance_tool_calls(head.open_tool_calls, record)
        yield line


def _chunks(lines: Iterable[bytes], size: int = 256) -> Iterator[bytes]:
    """The lines joined ``size`` at a time (one write per chunk, not per line)."""
    buffer: list[bytes] = []
    for line in lines:
        buffer.append(line)
        if len(buffer) >= size:
            yield b"".join(buffer)
            buffer = []
    yield b"".join(buffer)


class CurrentRender:
    """The current.jsonl that messages.jsonl implies, streamed in chunks.

    Two passes over messages.jsonl: the first collects the (few) marker records, the second
    yields the visible records' lines. Once iterated, ``head`` and ``totals`` are complete.
    """

    def __init__(self, files: ContextFiles) -> None:
        self.files = files
        self.head = HeadState()
        self.totals = StatsDelta()

    def __iter__(self) -> Iterator[bytes]:
        active = active_plan(self.files.messages)
        yield from _chunks(_rendered_lines(self._records(), active, self.head))

    def _records(self) -> Iterator[dict[str, Any]]:
        for _, line in iter_lines(self.files.messages):
            record: dict[str, Any] = orjson.loads(line)
            self.head.last_seq = record["seq"]
            self.head.messages_bytes += len(line) + 1
            count_record(self.totals, record)
            yield record


def active_plan(source: Path | BinaryIO, end: int | None = None) -> effective.Plan:
    """The markers in force in messages.jsonl[0:end] (first pass: only marker lines parse)."""
    lines = iter_lines(source, 0, end)
    return effective.plan(orjson.loads(x) for _, x in lines if MARKER in x)


def visible_records(f: BinaryIO, end: int, *, as_posted: bool = False) -> Iterator[dict[str, Any]]:
    """The effective context's records, from an open messages.jsonl up to ``end`` (with
    ``as_posted``, masked and cut messages as posted)."""
    active = active_plan(f, end)
    records = (orjson.loads(x) for _, x in iter_lines(f, 0, end))
    yield from effective.visible(records, active, as_posted=as_posted)


def span_records(f: BinaryIO, end: int, low: int, high: int) -> Iterator[dict[str, Any]]:
    """The visible records of seq ``low`` to ``high``: what a condense hands its summariser
    (messages as posted, masked, cut or not: the summary is where their facts survive)."""
    for record in visible_records(f, end, as_posted=True):
        if low <= effective.position(record) <= high:
            yield record


@dataclass(frozen=True)
class RecordSpan:
    """:func:`span_records` of an open messages.jsonl, iterated here, and its path, for a
    reader in another process that opens the file itself (the committed bytes never change)."""

    handle: BinaryIO
    path: Path
    end: int
    low: int
    high: int

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return span_records(self.handle, self.end, self.low, self.high)


def record_at(f: BinaryIO, seq: int, end: int) -> dict[str, Any] | None:
    """The record with this seq (bisection), or None."""
    offset = offset_after_seq(f, "seq", seq - 1, end)
    for _, line in iter_lines(f, offset, end):
        record: dict[str, Any] = orjson.loads(line)
        return record if record["seq"] == seq else None
    return None


def commit_marker(
    files: ContextFiles,
    head: HeadState,
    marker: Marker,
    summary: SummaryRecord | None,
    *,
    fsync: bool,
) -> tuple[HeadState, Marker]:
    """Append a marker (and its summaries.jsonl record) and rebuild current.jsonl."""
    record = _append_marker(files, head, marker, summary, fsync=fsync)
    new_head, _ = rebuild(files, fsync=fsync)
    return new_head, record


def _append_marker(
    files: ContextFiles,
    head: HeadState,
    marker: Marker,
    summary: SummaryRecord | None,
    *,
    fsync: bool,
) -> Marker:
    """The marker after ``head`` in messages.jsonl, its summaries.jsonl record first: one
    whose marker never made it is simply never in force."""
    record: Marker = {"seq": head.last_seq + 1, "type": MARKER_TYPE, **marker}
    if summary is not None:
        path = files.directory / SUMMARIES
        repair_tail(path, fsync=fsync, context=str(files.directory.name))
        last = last_record(path)
        record["summary_id"] = (last["id"] + 1) if last else 1
        line = {"id": record["summary_id"], **summary, "marker_seq": record["seq"]}
        append_bytes(path, dumps_line(line), fsync=fsync)
    append_bytes(files.messages, dumps_line(record), fsync=fsync)
    return record


@dataclass
class PreparedView:
    """The current.jsonl that messages.jsonl up to ``base`` and a compaction marker after it
    make, written beside current.jsonl (without the lock: the committed bytes never change),
    for :func:`commit_prepared` to finish under the lock."""

    path: Path
    base: HeadState  # the head it was rendered from
    view: HeadState  # its current.jsonl figures (the messages.jsonl ones come at the commit)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


@dataclass(frozen=True)
class ViewToPrepare:
    """What :func:`prepared_view` renders: plain data, so that it may run in another process.
    The caller names the file (:func:`prepared_path`): it knows what to remove should the
    process die before it answers."""

    files: ContextFiles
    base: HeadState
    marker: Marker
    fsync: bool
    path: Path


# A prepared current.jsonl this old belongs to no condense in flight (a condense has seconds
# to minutes): a service killed while rendering, or a condense cancelled just as its process
# created the file, left it behind.
STALE_PREPARED_S = 3600.0
_PREPARED_GLOB = f"{CURRENT}.*.prepared"


def prepared_path(files: ContextFiles) -> Path:
    """A new name for a prepared current.jsonl, beside it."""
    return files.current.with_name(f"{CURRENT}.{uuid.uuid4().hex}.prepared")


def remove_stale_prepared(files: ContextFiles, now: float) -> list[Path]:
    """Remove the prepared current.jsonl files beside current.jsonl last written over
    :data:`STALE_PREPARED_S` before ``now`` (a time.time()); the paths removed."""
    removed = []
    for path in files.directory.glob(_PREPARED_GLOB):
        try:
            if now - path.stat().st_mtime > STALE_PREPARED_S:
                path.unlink()
                removed.append(path)
        except FileNotFoundError:  # its own condense removed it meanwhile
            continue
    return removed


def prepared_view(job: ViewToPrepare) -> PreparedView:
    """:func:`prepare_view` from messages.jsonl as its path finds it, into ``job.path``."""
    with open(job.files.messages, "rb") as f:
        return prepare_view(f, job.base, job.marker, fsync=job.fsync, path=job.path)


def prepare_view(
    f: BinaryIO,
    base: HeadState,
    marker: Marker,
    *,
    fsync: bool,
    path: Path,
) -> PreparedView:
    """Render, from an open messages.jsonl, the current.jsonl of ``base`` with ``marker``
    into ``path``. It is fsynced here, outside the task lock: the commit then flushes only the lines
    appended since, and an append's fsync meanwhile has none of its megabytes to wait for.

    The rendering does not depend on the marker's seq (current.jsonl's lines carry none, and a
    compaction marker stands where its ``hides`` range starts), so records appended before the
    commit only add their lines after it.
    """
    end = base.messages_bytes
    provisional = {"seq": base.last_seq + 1, "type": MARKER_TYPE, **marker}
    markers = [orjson.loads(x) for _, x in iter_lines(f, 0, end) if MARKER in x]
    active = effective.plan([*markers, provisional])
    view = HeadState()
    try:
        with open(path, "wb") as out:
            records = (orjson.loads(x) for _, x in iter_lines(f, 0, end))
            for chunk in _chunks(_rendered_lines(records, active, view)):
                out.write(chunk)
            if fsync:
                os.fsync(out.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return PreparedView(path, base, view)


def commit_prepared(
    files: ContextFiles,
    prepared: PreparedView,
    head: HeadState,
    marker: Marker,
    summary: SummaryRecord | None,
    *,
    fsync: bool,
) -> tuple[HeadState, Marker] | None:
    """:func:`commit_marker` of a marker whose current.jsonl was prepared from an earlier head:
    the records appended since (``head``, under the lock) go after the prepared lines, then
    the marker is appended and the prepared file replaces current.jsonl. None, with nothing
    written, when a marker was appended since (or the file is no longer the one it was
    rendered from): the prepared rendering no longer holds. Prepared files other condenses
    left behind long ago go too."""
    base = prepared.base
    if head.messages_bytes < base.messages_bytes:  # cut since: an operator's repair
        return None
    tail = [
        line for _, line in iter_lines(files.messages, base.messages_bytes, head.messages_bytes)
    ]
    try:
        records = [orjson.loads(line) for line in tail]
    except orjson.JSONDecodeError:  # the file is not the one rendered (an operator's repair)
        return None
    seqs = [record.get("seq") for record in records]
    if seqs != list(range(base.last_seq + 1, head.last_seq + 1)) or any(map(is_marker, records)):
        return None
    accumulator = ContextAccumulator(prepared.view)
    lines = [accumulator.admit(r, line + b"\n") for r, line in zip(records, tail, strict=True)]
    record = _append_marker(files, head, marker, summary, fsync=fsync)
    append_bytes(prepared.path, b"".join(lines), fsync=fsync)
    os.replace(prepared.path, files.current)
    if fsync:
        fsync_dir(files.directory)
    for path in remove_stale_prepared(files, time.time()):
        log.info("%s: removed %s, left by an earlier condense", files.directory, path.name)
    new_head = accumulator.head
    new_head.last_seq = record["seq"]
    new_head.messages_bytes = head.messages_bytes + len(dumps_line(record))
    return new_head, record


def _stats_of(records: list[dict[str, Any]]) -> StatsDelta:
    stats = StatsDelta()
    for record in records:
        count_record(stats, record)
    return stats


def _idempotent_results(batches: list["Batch"], context_tokens: int) -> list[IdempotentResult]:
    results = []
    for batch in batches:
        first = batch[0][0]
        if "idempotency_key" in first and len(batch) == first.get("batch_size", 1):
            response = append_response([r for r, _ in batch], context_tokens)
            results.append(
                IdempotentResult(first["idempotency_key"], first["request_hash"], response)
            )
    return results


Batch = list[tuple[dict[str, Any], bytes]]


def _read_batches(
    files: ContextFiles, head: HeadState, *, fsync: bool, context: str
) -> list[Batch]:
    """The whole batches after the head; everything from the first bad line is cut. Nothing
    there was acknowledged, and a batch is acknowledged whole or not at all: a batch whose tail
    was lost is cut too."""
    batches: list[Batch] = []
    batch: Batch = []
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
        if remaining == 0:
            batches.append(batch)
            batch, end = [], offset + len(line) + 1
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


def write_group(
    files: ContextFiles, record_lines: list[bytes], current: list[bytes], *, fsync: bool
) -> None:
    """Append a group's records, then their current lines: one write per file, one fsync.

    current.jsonl is not fsynced: it is a view of messages.jsonl, and after a power loss a
    short or damaged one is rebuilt from it (:func:`recover`, ``ContextStore._whole_current``).
    """
    append_bytes(files.messages, b"".join(record_lines), fsync=fsync)
    append_bytes(files.current, b"".join(current), fsync=False)


class History:
    """A context's messages (no compaction markers) from an open messages.jsonl, counted as
    they go."""

    def __init__(self, handle: BinaryIO, end: int) -> None:
        self.handle = handle
        self.end = end
        self.count = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for _, line in iter_lines(self.handle, 0, self.end):
            record: dict[str, Any] = orjson.loads(line)
            if not is_marker(record):
                self.count += 1
                yield record
