"""Unit tests of app/storage/jsonl.py: streaming, bisection, tail repair and atomic writes."""

import io
import logging
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.context.files import record_at
from app.storage import jsonl
from app.storage.jsonl import (
    CHUNK,
    dumps_line,
    iter_lines,
    last_record,
    offset_after_seq,
    read_page,
    repair_tail,
    write_atomic,
)


def _records(rng: random.Random, count: int, key: str = "seq") -> list[dict[str, Any]]:
    """Records with strictly increasing (gapped) keys and very uneven line lengths."""
    records = []
    value = 0
    for _ in range(count):
        value += rng.choice((1, 1, 1, 2, 5))
        size = rng.choice((0, 1, 7, 50, 300, 4000, 70_000, 150_000))
        records.append({key: value, "pad": "x" * rng.randint(0, size)})
    return records


def _write(path: Path, records: list[dict[str, Any]]) -> list[int]:
    """Write the records as JSONL; returns each line's start offset."""
    offsets, data, offset = [], [], 0
    for record in records:
        line = dumps_line(record)
        offsets.append(offset)
        data.append(line)
        offset += len(line)
    path.write_bytes(b"".join(data))
    return offsets


def _brute_offset(records: list[dict[str, Any]], offsets: list[int], after: int, end: int) -> int:
    """First line start within [0, end) whose seq exceeds ``after``, else ``end``."""
    for record, offset in zip(records, offsets, strict=True):
        if offset >= end:
            break
        if record["seq"] > after:
            return offset
    return end


# -- iter_lines ---------------------------------------------------------------------------


def test_iter_lines_across_chunk_boundaries(tmp_path: Path) -> None:
    """Lines longer than one read chunk (1 MiB) and lines straddling chunk edges come out whole,
    with exact offsets, whether given a path or an open file."""
    lines = [
        b"short",
        b"a" * (CHUNK - 3),  # ends right before a chunk edge
        b"",  # an empty line
        b"b" * (CHUNK * 2 + 17),  # spans three chunks
        b"c" * CHUNK,  # exactly one chunk without its newline
        b"tail",
    ]
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    expected, offset = [], 0
    for line in lines:
        expected.append((offset, line))
        offset += len(line) + 1

    assert list(iter_lines(path)) == expected
    with path.open("rb") as f:
        assert list(iter_lines(f)) == expected


def test_iter_lines_respects_start_and_end(tmp_path: Path) -> None:
    """[start, end) bounds: a line cut by ``end`` or left without newline is not yielded."""
    lines = [b"x" * 10, b"y" * (CHUNK + 5), b"z" * 3]
    data = b"".join(line + b"\n" for line in lines)
    path = tmp_path / "f.jsonl"
    path.write_bytes(data + b"partial-without-newline")
    second = len(lines[0]) + 1
    third = second + len(lines[1]) + 1

    assert list(iter_lines(path)) == [(0, lines[0]), (second, lines[1]), (third, lines[2])]
    assert list(iter_lines(path, second)) == [(second, lines[1]), (third, lines[2])]
    assert list(iter_lines(path, 0, third)) == [(0, lines[0]), (second, lines[1])]
    assert list(iter_lines(path, 0, third - 1)) == [(0, lines[0])]  # end cuts line 2
    assert list(iter_lines(path, second, second)) == []
    assert list(iter_lines(io.BytesIO(b"no newline at all"))) == []


# -- offset_after_seq / read_page ---------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_offset_after_seq_matches_brute_force(tmp_path: Path, seed: int) -> None:
    """Bisection finds the same line start as a linear scan, for every kind of ``after``
    (0, negative, inside gaps, exact keys, the last key, beyond the end) and for ``end`` at the
    file's end or at an earlier line boundary (a committed head shorter than the file)."""
    rng = random.Random(seed)
    records = _records(rng, rng.randint(1, 60))
    path = tmp_path / "seq.jsonl"
    offsets = _write(path, records)
    size = path.stat().st_size
    last = records[-1]["seq"]
    afters = {0, -1, 1, last - 1, last, last + 1, last + 1000}
    afters |= {r["seq"] for r in records} | {rng.randint(0, last + 3) for _ in range(30)}
    ends = {size, 0, *rng.sample(offsets, min(5, len(offsets)))}

    with path.open("rb") as f:
        for end in sorted(ends):
            for after in sorted(afters):
                expected = _brute_offset(records, offsets, after, end)
                assert offset_after_seq(f, "seq", after, end) == expected, (after, end)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_read_page_matches_brute_force(tmp_path: Path, seed: int) -> None:
    """read_page returns exactly the first ``limit`` records with seq > after inside [0, end)."""
    rng = random.Random(seed)
    records = _records(rng, rng.randint(1, 50))
    path = tmp_path / "page.jsonl"
    offsets = _write(path, records)
    size = path.stat().st_size
    last = records[-1]["seq"]

    with path.open("rb") as f:
        for _ in range(80):
            after = rng.choice((0, last, last + 7, rng.randint(-2, last + 2)))
            limit = rng.choice((0, 1, 2, 5, 1000))
            cut = rng.randrange(len(records) + 1)
            end = offsets[cut] if cut < len(records) else size
            visible = [r for r, o in zip(records, offsets, strict=True) if o < end]
            expected = [r for r in visible if r["seq"] > after][:limit]
            assert read_page(f, "seq", after, limit, end) == expected, (after, limit, end)


@pytest.mark.parametrize("seed", [21, 22])
def test_record_at_finds_each_seq_within_end_and_nothing_else(tmp_path: Path, seed: int) -> None:
    """record_at (the context store's lookup of one message by seq, which reads that one line
    after bisection) finds the record of each seq inside [0, end), and None for a seq in a gap,
    below the first, past the last or past ``end`` (a committed head shorter than the file)."""
    rng = random.Random(seed)
    records = _records(rng, rng.randint(1, 50))
    path = tmp_path / "records.jsonl"
    offsets = _write(path, records)
    size = path.stat().st_size
    last = records[-1]["seq"]
    cut = rng.randrange(len(records) + 1)
    with path.open("rb") as f:
        for end in (size, offsets[cut] if cut < len(records) else size, 0):
            visible = {r["seq"]: r for r, o in zip(records, offsets, strict=True) if o < end}
            for value in range(-1, last + 3):
                if value >= 1:  # seqs start at 1
                    assert record_at(f, value, end) == visible.get(value), (value, end)


def test_read_page_other_key_and_huge_lines(tmp_path: Path) -> None:
    """Bisection works on another key (journals use ``id``) and across lines over 1 MiB."""
    records = [{"id": i, "pad": "p" * (CHUNK + i if i % 3 == 0 else i)} for i in range(1, 10)]
    path = tmp_path / "planning.jsonl"
    _write(path, records)
    size = path.stat().st_size
    with path.open("rb") as f:
        for after in range(0, 11):
            assert read_page(f, "id", after, 3, size) == records[after : after + 3]


def test_offset_after_seq_on_empty_range(tmp_path: Path) -> None:
    """An empty file or an empty committed range yields offset 0 and an empty page."""
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    with path.open("rb") as f:
        assert offset_after_seq(f, "seq", 5, 0) == 0
        assert read_page(f, "seq", 5, 10, 0) == []


# -- repair_tail --------------------------------------------------------------------------


def _good_file(path: Path, count: int = 5) -> bytes:
    data = b"".join(dumps_line({"seq": i, "content": "m" * i * 10}) for i in range(1, count + 1))
    path.write_bytes(data)
    return data


def test_repair_tail_cuts_incomplete_last_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A last line without its newline (half a JSON object) is cut back to the last good line,
    and the cut is logged."""
    path = tmp_path / "m.jsonl"
    good = _good_file(path)
    path.write_bytes(good + b'{"seq": 6, "content": "half')
    with caplog.at_level(logging.WARNING, logger=jsonl.__name__):
        assert repair_tail(path, fsync=True, context="t") == len(good)
    assert path.read_bytes() == good
    assert any("torn" in r.getMessage() for r in caplog.records)


def test_repair_tail_cuts_parsable_line_without_newline(tmp_path: Path) -> None:
    """Even a parsable last line is torn if its newline is missing: the append never finished."""
    path = tmp_path / "m.jsonl"
    good = _good_file(path)
    path.write_bytes(good + b'{"seq": 6}')
    assert repair_tail(path, fsync=False, context="t") == len(good)
    assert path.read_bytes() == good


def test_repair_tail_cuts_unparsable_last_line(tmp_path: Path) -> None:
    """A complete (newline-terminated) last line that is not JSON is cut."""
    path = tmp_path / "m.jsonl"
    good = _good_file(path)
    path.write_bytes(good + b"\x00\x00garbage}\n")
    assert repair_tail(path, fsync=False, context="t") == len(good)
    assert path.read_bytes() == good


def test_repair_tail_from_a_known_good_start(tmp_path: Path) -> None:
    """With ``start``, everything from the first bad line after it is cut, even good lines
    that follow a bad one."""
    path = tmp_path / "m.jsonl"
    good = _good_file(path, 3)
    path.write_bytes(good + b"not json\n" + dumps_line({"seq": 9}) + b'{"x"')
    assert repair_tail(path, 0, fsync=False, context="t") == len(good)
    assert path.read_bytes() == good


def test_repair_tail_leaves_good_file_untouched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file of whole, parsable lines (including a last line over 1 MiB) is not modified and
    nothing is logged; an empty or missing file reports size 0."""
    path = tmp_path / "m.jsonl"
    good = _good_file(path) + dumps_line({"seq": 6, "content": "L" * (CHUNK * 2)})
    path.write_bytes(good)
    mtime = path.stat().st_mtime_ns
    with caplog.at_level(logging.WARNING, logger=jsonl.__name__):
        assert repair_tail(path, fsync=False, context="t") == len(good)
    assert path.read_bytes() == good
    assert path.stat().st_mtime_ns == mtime
    assert not caplog.records

    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert repair_tail(empty, fsync=False, context="t") == 0
    assert repair_tail(tmp_path / "missing.jsonl", fsync=False, context="t") == 0


def test_repair_tail_cuts_a_torn_line_longer_than_a_block(tmp_path: Path) -> None:
    """The start of a very long torn last line is found by scanning back over many blocks."""
    path = tmp_path / "m.jsonl"
    good = _good_file(path)
    path.write_bytes(good + b'{"seq": 6, "content": "' + b"t" * (CHUNK + 70_000))
    assert repair_tail(path, fsync=False, context="t") == len(good)
    assert path.read_bytes() == good


def test_repair_tail_whole_file_torn(tmp_path: Path) -> None:
    """A file whose only line is torn is cut to empty."""
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"seq": 1, "con')
    assert repair_tail(path, fsync=False, context="t") == 0
    assert path.read_bytes() == b""


# -- last_record --------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 10, 4095, 4096, 5000, 70_000, CHUNK * 3])
def test_last_record_with_long_last_line(tmp_path: Path, size: int) -> None:
    """The last record is found however long it is (the tail window keeps growing)."""
    path = tmp_path / "j.jsonl"
    last = {"seq": 3, "content": "z" * size}
    path.write_bytes(dumps_line({"seq": 1}) + dumps_line({"seq": 2}) + dumps_line(last))
    assert last_record(path) == last


def test_last_record_single_and_empty(tmp_path: Path) -> None:
    """A one-line file (long or short) returns that line; an empty or missing file, None."""
    path = tmp_path / "j.jsonl"
    only = {"id": 1, "plan": "q" * 20_000}
    path.write_bytes(dumps_line(only))
    assert last_record(path) == only
    path.write_bytes(b"")
    assert last_record(path) is None
    assert last_record(tmp_path / "missing.jsonl") is None


# -- write_atomic -------------------------------------------------------------------------


@pytest.mark.parametrize("fsync", [True, False])
def test_write_atomic_replaces_content(tmp_path: Path, fsync: bool) -> None:
    """The file is replaced by exactly the chunks (shorter or longer than before), the byte count
    is returned, and no temp file is left behind."""
    path = tmp_path / "current.jsonl"
    path.write_bytes(b"old content that is rather long\n" * 100)
    chunks = [orjson.dumps({"role": "user", "content": "hi"}) + b"\n", b"", b"x" * CHUNK]
    assert write_atomic(path, iter(chunks), fsync=fsync) == sum(map(len, chunks))
    assert path.read_bytes() == b"".join(chunks)
    assert write_atomic(path, iter([b"short\n"]), fsync=fsync) == 6
    assert path.read_bytes() == b"short\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["current.jsonl"]


def test_write_atomic_creates_missing_file_and_keeps_old_on_failure(tmp_path: Path) -> None:
    """A missing target is created; if producing the chunks fails midway, the old file stays."""
    path = tmp_path / "current.jsonl"
    assert write_atomic(path, iter([b"a\n"]), fsync=False) == 2
    assert path.read_bytes() == b"a\n"

    def failing() -> Any:
        yield b"partial"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_atomic(path, failing(), fsync=False)
    assert path.read_bytes() == b"a\n"
