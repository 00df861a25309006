"""A compaction's current.jsonl prepared outside the task lock (prepare_view) and finished
under it (commit_prepared) is exactly what rebuilding from messages.jsonl gives, with records
appended in between; a marker appended in between makes the commit refuse, writing nothing.
A commit removes the prepared files that condenses cut short left behind long ago."""

import os
import time
from pathlib import Path
from typing import Any

from app.context.files import (
    STALE_PREPARED_S,
    ContextFiles,
    PreparedView,
    Where,
    accept_loss,
    commit_marker,
    commit_prepared,
    prepare_view,
    prepared_path,
    rebuild,
    write_group,
)
from app.context.records import ContextAccumulator, HeadState
from app.context.shapes import Marker
from app.formats.costs import TokenCosts
from app.tokens.counters import HeuristicCounter

COSTS = TokenCosts(HeuristicCounter())


def append(files: ContextFiles, head: HeadState, messages: list[dict[str, Any]]) -> HeadState:
    accumulator = ContextAccumulator(head)
    prepared = accumulator.prepare(messages, costs=COSTS, timestamp="t", max_message_bytes=1 << 20)
    current = [accumulator.admit(record, line) for record, line in prepared]
    write_group(files, [line for _, line in prepared], current, fsync=False)
    return accumulator.head


def turns(start: int, count: int) -> list[dict[str, Any]]:
    return [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} " + "x" * n}
        for n in range(start, start + count)
    ]


def condense(hides: tuple[int, int]) -> Marker:
    return {
        "role": "user",
        "content": "[Summary] of the earlier turns",
        "marker": "condense",
        "hides": list(hides),
        "hidden_messages": hides[1] - hides[0] + 1,
        "timestamp": "t",
        "tokens": 9,
        "format_tokens": {"anthropic": 8, "ollama": 9},
    }


def prepare(files: ContextFiles, base: HeadState) -> PreparedView:
    """The view of a condense hiding seqs 2-30 after ``base``, prepared."""
    with open(files.messages, "rb") as f:
        return prepare_view(f, base, condense((2, 30)), fsync=True, path=prepared_path(files))


def files_in(tmp_path: Path) -> ContextFiles:
    (tmp_path / "messages.jsonl").touch()
    (tmp_path / "current.jsonl").touch()
    return ContextFiles(tmp_path)


def test_a_prepared_view_with_appends_since_is_what_a_rebuild_gives(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    base = append(files, HeadState(), turns(0, 40))
    prepared = prepare(files, base)
    head = append(files, base, turns(40, 7))  # appended while it was prepared

    done = commit_prepared(files, prepared, head, condense((2, 30)), None, fsync=False)

    assert done is not None
    new_head, record = done
    assert record["seq"] == head.last_seq + 1
    assert not prepared.path.exists()
    served = files.current.read_bytes()
    rebuilt, _ = rebuild(files, fsync=False)
    assert files.current.read_bytes() == served
    assert new_head == rebuilt


def test_a_marker_appended_since_refuses_the_prepared_view(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    base = append(files, HeadState(), turns(0, 40))
    prepared = prepare(files, base)
    head, _ = commit_marker(files, base, condense((10, 20)), None, fsync=False)
    size = files.messages.stat().st_size

    assert commit_prepared(files, prepared, head, condense((2, 30)), None, fsync=False) is None
    assert files.messages.stat().st_size == size
    prepared.discard()
    assert not prepared.path.exists()


def test_an_operators_repair_since_refuses_the_prepared_view(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    base = append(files, HeadState(), turns(0, 40))
    prepared = prepare(files, base)
    with open(files.messages, "r+b") as f:
        f.truncate(base.messages_bytes // 2)
    repaired = accept_loss(files, base, "t", fsync=False, where=Where("t", 0))
    assert repaired is not None
    head = repaired[0]
    size = files.messages.stat().st_size

    assert commit_prepared(files, prepared, head, condense((2, 30)), None, fsync=False) is None
    assert files.messages.stat().st_size == size


def test_a_commit_removes_prepared_files_left_long_ago_and_no_recent_one(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    base = append(files, HeadState(), turns(0, 40))
    left = prepared_path(files)  # by a service killed while it rendered
    left.write_bytes(b"{}\n")
    long_ago = time.time() - STALE_PREPARED_S - 60
    os.utime(left, (long_ago, long_ago))
    in_flight = prepare(files, base)  # another condense's, not committed yet
    prepared = prepare(files, base)

    assert commit_prepared(files, prepared, base, condense((2, 30)), None, fsync=False)

    assert not left.exists()
    assert in_flight.path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["messages.jsonl", "current.jsonl", in_flight.path.name]
    )
