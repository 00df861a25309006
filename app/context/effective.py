"""The effective context: which records of messages.jsonl a payload shows, in what order. Pure.

``messages.jsonl`` only grows. Compaction and rewind append *marker* records, never delete:

- a compaction marker (``condense``, ``truncation``, ``elision``) hides the records whose
  *position* lies in its ``hides`` range [a, b] and takes their place: it is rendered at
  position a. A normal record's position is its seq; a compaction marker's position is a.
  So a later compaction over a span that contains an earlier marker hides that marker too.
- a ``rewind`` marker {to_seq, include_target} removes every record whose seq lies between the
  cut (to_seq, or to_seq + 1 with include_target) and the rewind itself: messages, and the
  compactions made after the cut (whose hidden records come back).

The markers are few, so they are collected in a first pass (:func:`plan`); the second pass
streams the records and yields the visible ones (:func:`visible`).
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

COMPACTION_KINDS = frozenset({"condense", "truncation", "elision"})


def is_marker(record: dict[str, Any]) -> bool:
    return "marker" in record


def position(record: dict[str, Any]) -> int:
    """Where a record stands in the effective context."""
    if record.get("marker") in COMPACTION_KINDS:
        start: int = record["hides"][0]
        return start
    seq: int = record["seq"]
    return seq


@dataclass
class Plan:
    """The active markers, and what they remove and hide."""

    compactions: list[dict[str, Any]] = field(default_factory=list)  # active, by position
    removed: list[tuple[int, int]] = field(default_factory=list)  # seq intervals, inclusive
    hidden: list[tuple[int, int]] = field(default_factory=list)  # position intervals, inclusive

    def is_removed(self, seq: int) -> bool:
        return any(low <= seq <= high for low, high in self.removed)

    def is_hidden(self, seq: int) -> bool:
        return any(low <= seq <= high for low, high in self.hidden)


def plan(markers: Iterable[dict[str, Any]]) -> Plan:
    """Resolve which markers are in force, given every marker record in seq order."""
    ordered = sorted(markers, key=lambda m: m["seq"])
    result = Plan()
    for marker in reversed(ordered):  # a rewind counts only if no later rewind removed it
        if marker["marker"] == "rewind" and not result.is_removed(marker["seq"]):
            cut = marker["to_seq"] + (1 if marker.get("include_target") else 0)
            if cut < marker["seq"]:
                result.removed.append((cut, marker["seq"] - 1))
    active: list[dict[str, Any]] = []
    for marker in ordered:
        if marker["marker"] not in COMPACTION_KINDS or result.is_removed(marker["seq"]):
            continue
        low, high = marker["hides"]
        active = [m for m in active if not low <= position(m) <= high]
        active.append(marker)
    result.compactions = sorted(active, key=position)
    result.hidden = [(m["hides"][0], m["hides"][1]) for m in result.compactions]
    return result


def visible(records: Iterable[dict[str, Any]], active: Plan) -> Iterator[dict[str, Any]]:
    """The records a payload shows, in order: unhidden messages and active compaction markers."""
    pending = iter(active.compactions)
    next_marker = next(pending, None)
    for record in records:
        if is_marker(record):
            continue
        seq = record["seq"]
        while next_marker is not None and position(next_marker) <= seq:
            yield next_marker
            next_marker = next(pending, None)
        if not active.is_removed(seq) and not active.is_hidden(seq):
            yield record
    while next_marker is not None:
        yield next_marker
        next_marker = next(pending, None)
