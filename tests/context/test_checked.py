"""What payloads found whole of each current.jsonl: only the lines after the bytes last
found whole are parsed again, and any change to those bytes makes them parsed again."""

from typing import BinaryIO

import orjson
import pytest

from app.context.checked import ParsedPrefixes
from app.storage.jsonl import first_damaged_line

CONTEXT = ("task", 0)


def lines(*contents: str) -> bytes:
    return b"".join(orjson.dumps({"role": "user", "content": c}) + b"\n" for c in contents)


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Where each parse began."""
    seen: list[int] = []

    def recorded(source: BinaryIO, end: int, start: int = 0) -> int | None:
        seen.append(start)
        return first_damaged_line(source, end, start)

    monkeypatch.setattr("app.context.checked.first_damaged_line", recorded)
    return seen


def test_only_the_lines_appended_since_are_parsed_again(starts: list[int]) -> None:
    parsed = ParsedPrefixes()
    first = lines("a", "b")
    assert parsed.first_damaged_line(CONTEXT, first) is None
    grown = first + lines("c")
    assert parsed.first_damaged_line(CONTEXT, grown) is None
    assert parsed.first_damaged_line(CONTEXT, grown) is None
    assert starts == [0, len(first), len(grown)]
    damaged = grown + b"{not json\n"
    assert parsed.first_damaged_line(CONTEXT, damaged) == len(grown)


def test_bytes_changed_in_place_are_parsed_again(starts: list[int]) -> None:
    parsed = ParsedPrefixes()
    whole = lines("a", "b", "c")
    assert parsed.first_damaged_line(CONTEXT, whole) is None
    second = len(lines("a"))
    damaged = (
        whole[:second] + b"\x00" * len(lines("b")[:-1]) + whole[second + len(lines("b")) - 1 :]
    )
    assert len(damaged) == len(whole)
    assert parsed.first_damaged_line(CONTEXT, damaged) == second
    assert parsed.first_damaged_line(CONTEXT, whole) is None  # repaired: parsed whole again
    assert starts == [0, 0, 0]


def test_a_file_shorter_than_what_was_parsed_is_parsed_whole(starts: list[int]) -> None:
    parsed = ParsedPrefixes()
    assert parsed.first_damaged_line(CONTEXT, lines("a", "b", "c")) is None
    assert parsed.first_damaged_line(CONTEXT, lines("summary")) is None  # a compaction's file
    assert starts == [0, 0]


def test_contexts_are_apart_and_bounded(starts: list[int]) -> None:
    parsed = ParsedPrefixes(max_contexts=2)
    data = lines("a")
    for context in (("t1", 0), ("t1", 1), ("t2", 0)):
        assert parsed.first_damaged_line(context, data) is None
    assert parsed.first_damaged_line(("t2", 0), data) is None  # remembered
    assert parsed.first_damaged_line(("t1", 0), data) is None  # the oldest, forgotten
    assert starts == [0, 0, 0, len(data), 0]
