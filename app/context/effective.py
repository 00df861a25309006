"""The effective context: which records of messages.jsonl a payload shows, in what order. Pure.

``messages.jsonl`` only grows. Compaction and rewind append *marker* records, never delete:

- a compaction marker (``condense``, ``truncation``, ``elision``) hides the records whose
  *position* lies in its ``hides`` range [a, b] and takes their place: it is rendered at
  position a. A normal record's position is its seq; a compaction marker's position is a.
  So a later compaction over a span that contains an earlier marker hides that marker too.
- a ``mask`` marker {masks: [{seq, content, tokens, format_tokens}]} replaces the content of
  earlier tool results with a one-line placeholder (and their costs with the placeholder's); the
  result stays where it was, paired with its call. It renders nowhere itself. A tool result an
  elision cut (a marker hiding that one seq) is masked the same way: the placeholder replaces
  the cut content.
- a ``rewind`` marker {to_seq, include_target} removes every record whose seq lies between the
  cut (to_seq, or to_seq + 1 with include_target) and the rewind itself: messages, and the
  compactions and masks made after the cut (whose hidden records come back whole).

A marker is told apart from a message by its envelope, ``"type": "marker"``, which only the
service writes: a message may not carry ``type`` or any other field a marker is read by
(:data:`app.context.records.RESERVED_FIELDS`). Records written before the envelope existed
are read as markers only when they have the shape the service gave its markers: a compaction
with its ``hides`` range before it and its ``summary_id``, a rewind with no role. Anything else
was acknowledged as a message and stays one.

The markers are few, so they are collected in a first pass (:func:`plan`); the second pass
streams the records and yields the visible ones (:func:`visible`).
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

COMPACTION_KINDS = frozenset({"condense", "truncation", "elision"})
MASK: Final = "mask"
# On a masked record as a payload shows it: the seq of the mask marker (never stored).
MASKED_BY = "masked_by"
MARKER_TYPE = "marker"  # the envelope's "type" on the records the service writes


def is_marker(record: dict[str, Any]) -> bool:
    """Whether the service wrote this record as a marker (compaction or rewind)."""
    if "type" in record:
        return bool(record["type"] == MARKER_TYPE)
    return "marker" in record and _legacy_marker(record)


def marker_kind(record: dict[str, Any]) -> str | None:
    """The marker's kind (condense, truncation, elision, mask, rewind, lost); None for a
    message."""
    return str(record["marker"]) if is_marker(record) else None


def _legacy_marker(record: dict[str, Any]) -> bool:
    """A record from before the envelope: a marker only in the exact shape the service gave."""
    seq, kind = record.get("seq"), record.get("marker")
    if not isinstance(seq, int):
        return False
    if kind == "rewind":
        target = record.get("to_seq")
        return "role" not in record and isinstance(target, int) and 0 < target < seq
    hides = record.get("hides")
    return (
        kind in COMPACTION_KINDS
        and isinstance(record.get("summary_id"), int)
        and isinstance(hides, list)
        and len(hides) == 2
        and all(isinstance(n, int) for n in hides)
        and 0 < hides[0] <= hides[1] < seq
    )


def position(record: dict[str, Any]) -> int:
    """Where a record stands in the effective context."""
    if marker_kind(record) in COMPACTION_KINDS:
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
    masks: dict[int, dict[str, Any]] = field(default_factory=dict)  # seq -> what replaces it

    def is_removed(self, seq: int) -> bool:
        return any(low <= seq <= high for low, high in self.removed)

    def is_hidden(self, seq: int) -> bool:
        return any(low <= seq <= high for low, high in self.hidden)

    def as_posted(self) -> "Plan":
        """This plan without what only changes how a message looks: masks, and the elisions
        that cut one message (shown as posted); the compactions that hide messages stay."""
        kept = [m for m in self.compactions if not _cuts_one(m)]
        return Plan(
            compactions=kept,
            removed=self.removed,
            hidden=[(m["hides"][0], m["hides"][1]) for m in kept],
        )


def _cuts_one(marker: dict[str, Any]) -> bool:
    return bool(marker["marker"] == "elision" and marker["hides"][0] == marker["hides"][1])


def plan(markers: Iterable[dict[str, Any]]) -> Plan:
    """Resolve which markers are in force, given every marker record (others are ignored)."""
    ordered = sorted(filter(is_marker, markers), key=lambda m: m["seq"])
    result = Plan()
    for marker in reversed(ordered):  # a rewind counts only if no later rewind removed it
        if marker["marker"] == "rewind" and not result.is_removed(marker["seq"]):
            cut = marker["to_seq"] + (1 if marker.get("include_target") else 0)
            if cut < marker["seq"]:
                result.removed.append((cut, marker["seq"] - 1))
    active: list[dict[str, Any]] = []
    for marker in ordered:
        if result.is_removed(marker["seq"]):
            continue
        if marker["marker"] == MASK:
            for mask in marker["masks"]:
                # What a masked record takes: all but the seq, which it keeps (a cut result's
                # marker has its own).
                replacing = {key: value for key, value in mask.items() if key != "seq"}
                result.masks[mask["seq"]] = replacing | {MASKED_BY: marker["seq"]}
        if marker["marker"] not in COMPACTION_KINDS:
            continue
        low, high = marker["hides"]
        active = [m for m in active if not low <= position(m) <= high]
        active.append(marker)
    result.compactions = sorted(active, key=position)
    result.hidden = [(m["hides"][0], m["hides"][1]) for m in result.compactions]
    return result


def visible(
    records: Iterable[dict[str, Any]], active: Plan, *, as_posted: bool = False
) -> Iterator[dict[str, Any]]:
    """The records a payload shows, in order: unhidden messages and active compaction markers.
    ``as_posted``: masked tool results and messages an elision cut as they were posted (what a
    summariser reads: the summary is where their facts survive)."""
    if as_posted:
        active = active.as_posted()
    pending = iter(active.compactions)
    next_marker = next(pending, None)
    for record in records:
        if is_marker(record):
            continue
        seq = record["seq"]
        while next_marker is not None and position(next_marker) <= seq:
            yield _shown(next_marker, active)
            next_marker = next(pending, None)
        if not active.is_removed(seq) and not active.is_hidden(seq):
            yield _shown(record, active)
    while next_marker is not None:
        yield _shown(next_marker, active)
        next_marker = next(pending, None)


def _shown(record: dict[str, Any], active: Plan) -> dict[str, Any]:
    """A visible record as shown: masked if a mask replaces it (a message by its seq, a cut
    message's elision marker by the one seq it hides, if the mask came after the cut: a later
    elision cut the placeholder itself)."""
    if not is_marker(record):
        mask = active.masks.get(record["seq"])
    elif _cuts_one(record):
        mask = active.masks.get(record["hides"][0])
        if mask is not None and mask[MASKED_BY] < record["seq"]:
            mask = None
    else:
        mask = None
    return record if mask is None else record | mask
