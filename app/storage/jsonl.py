"""JSON Lines files: durable appends, torn-tail repair, seq lookup and bounded streaming.

All functions here block; callers run them in a worker thread, or on the event loop when
they are known to be quick (app.storage.file_work).
"""

import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import orjson

log = logging.getLogger(__name__)

CHUNK = 1 << 20


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dumps_line(record: Mapping[str, Any]) -> bytes:
    # orjson never emits a raw newline inside a value, so one record is always one line.
    return orjson.dumps(record) + b"\n"


def size_of(path: Path) -> int:
    """File size, or -1 when the file does not exist."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


def append_bytes(path: Path, data: bytes, *, fsync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def truncate(path: Path, size: int, *, fsync: bool) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, chunks: Iterator[bytes], *, fsync: bool) -> int:
    """Replace ``path`` with the chunks: temp file, fsync, rename. Returns the bytes written."""
    tmp = path.with_name(path.name + ".tmp")
    written = 0
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
            written += len(chunk)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)
    return written


def iter_lines(
    source: Path | BinaryIO, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, bytes]]:
    """Yield (offset, line without newline) for the complete lines in [start, end)."""
    if isinstance(source, Path):
        with open(source, "rb") as f:
            yield from iter_lines(f, start, end)
        return
    source.seek(start)
    offset = start
    pending = b""
    remaining = None if end is None else end - start
    while remaining is None or remaining > 0:
        chunk = source.read(CHUNK if remaining is None else min(CHUNK, remaining))
        if not chunk:
            break
        if remaining is not None:
            remaining -= len(chunk)
        pending += chunk
        lines = pending.split(b"\n")
        pending = lines.pop()
        for line in lines:
            yield offset, line
            offset += len(line) + 1


def first_damaged_line(source: Path | BinaryIO, end: int, start: int = 0) -> int | None:
    """The offset of the first whole line in [start, end) that is not a JSON object, or None
    (``start`` on a line boundary). Recovery repairs tails; this finds bytes changed in the
    middle, by a disk or a hand."""
    for offset, line in iter_lines(source, start, end):
        try:
            if not isinstance(orjson.loads(line), dict):
                return offset
        except orjson.JSONDecodeError:
            return offset
    return None


def read_page(
    f: BinaryIO, key: str, after: int, limit: int, end: int, max_bytes: int | None = None
) -> list[dict[str, Any]]:
    """Up to ``limit`` records with ``key`` > ``after`` from [0, end) of an open file.

    With ``max_bytes`` the page also stops once it holds that many bytes of records (it always
    holds at least one), so a page of huge records stays small in memory.
    """
    records: list[dict[str, Any]] = []
    size = 0
    if limit <= 0:
        return records
    for _, line in iter_lines(f, offset_after_seq(f, key, after, end), end):
        # Only whole lines come here (a line being written has no newline yet): one that does
        # not parse is damage, which must not pass for the end of the history.
        records.append(orjson.loads(line))
        size += len(line)
        if len(records) == limit or (max_bytes is not None and size >= max_bytes):
            break
    return records


def repair_tail(path: Path, start: int | None = None, *, fsync: bool, context: str) -> int:
    """Cut whatever after ``start`` is not a whole, parsable line; return the new size.

    ``start`` must be a line start known to be good; by default the start of the last line.
    """
    size = size_of(path)
    if size <= 0:
        return max(size, 0)
    if start is None:
        with open(path, "rb") as f:
            start = _start_of_line_containing(f, size - 1, floor=0)
    good_end = start
    for offset, line in iter_lines(path, start):
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError:
            break
        good_end = offset + len(line) + 1
    if good_end != size:
        log.warning("%s: cut %d torn bytes from %s", context, size - good_end, path.name)
        truncate(path, good_end, fsync=fsync)
    return good_end


def last_record(path: Path) -> dict[str, Any] | None:
    """The last complete record of a file (reads only its tail)."""
    size = size_of(path)
    if size <= 0:
        return None
    with open(path, "rb") as f:
        window = 4096
        while True:
            start = max(0, size - window)
            f.seek(start)
            data = f.read(size - start)
            body = data[: data.rfind(b"\n")] if data.endswith(b"\n") else data
            cut = body.rfind(b"\n")
            if cut >= 0 or start == 0:
                line = body[cut + 1 :]
                if not line:
                    return None
                record: dict[str, Any] = orjson.loads(line)
                return record
            window *= 4


def offset_after_seq(f: BinaryIO, key: str, after: int, end: int) -> int:
    """Byte offset of the first line in [0, end) whose ``key`` exceeds ``after`` (bisection).

    Records are appended with strictly increasing keys, and ``end`` is a line boundary.
    """
    if after <= 0 or end <= 0:
        return 0
    lo, hi = 0, end  # both are always line starts; the answer lies in [lo, hi]
    while lo < hi:
        start = _start_of_line_containing(f, (lo + hi) // 2, floor=lo)
        f.seek(start)
        line = f.readline()
        if int(orjson.loads(line)[key]) > after:
            hi = start
        else:
            lo = start + len(line)
    return lo


def _start_of_line_containing(f: BinaryIO, pos: int, floor: int) -> int:
    while pos > floor:
        block_start = max(floor, pos - 65536)
        f.seek(block_start)
        newline = f.read(pos - block_start).rfind(b"\n")
        if newline >= 0:
            return block_start + newline + 1
        pos = block_start
    return floor


def iter_lines_backward(
    f: BinaryIO, end: int, start: int = 0, chunk: int = CHUNK
) -> Iterator[bytes]:
    """The complete lines of [start, end) of an open file (``start`` on a line boundary), last
    first, without newlines; reads ``chunk`` bytes at a time from the end, so the tail of a
    huge file costs only its tail."""
    position = end
    pending = b""
    while position > start:
        low = max(start, position - chunk)
        f.seek(low)
        pending = f.read(position - low) + pending
        position = low
        lines = pending.split(b"\n")
        pending = lines[0]  # maybe the end of a line that began earlier
        for line in reversed(lines[1:]):
            if line:
                yield line
    if pending:
        yield pending
