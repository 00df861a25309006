"""The effective context computed the slow, obvious way: a reference to check the service's
(app/context/effective.py) against, by hand-built histories and random ones."""

from typing import Any

from app.context import effective

Record = dict[str, Any]


def reference_context(records: list[Record]) -> list[Record]:
    """The effective context by a naive state machine, independent of effective.plan.

    Records apply in seq order: a message is appended; a compaction marker removes the visible
    entries whose position lies in its range and takes its place at position a; a mask marker
    replaces what the records it names show (a message, or the elision marker that cut just
    that one); a rewind puts back the state as it was just before
    its cut (so later records and markers are undone).
    """
    before: dict[int, list[Record]] = {}
    shown_now: list[Record] = []
    for record in sorted(records, key=lambda r: r["seq"]):
        before[record["seq"]] = list(shown_now)
        kind = record.get("marker")
        if kind is None:
            shown_now.append(record)
        elif kind == "rewind":
            cut = record["to_seq"] + (1 if record.get("include_target") else 0)
            if cut < record["seq"]:
                shown_now = list(before[cut])
        elif kind == effective.MASK:
            masks = {
                m["seq"]: {k: v for k, v in m.items() if k != "seq"}
                | {effective.MASKED_BY: record["seq"]}
                for m in record["masks"]
            }
            shown_now = [r | masks.get(_masked_seq(r), {}) for r in shown_now]
        else:
            low, high = record["hides"]
            shown_now = [r for r in shown_now if not low <= effective.position(r) <= high]
            shown_now.append(record)
            shown_now.sort(key=effective.position)
    return shown_now


def _masked_seq(shown: Record) -> int | None:
    """The seq a mask names to replace what this entry shows: a message's own, or the one
    message an elision marker cut."""
    kind = shown.get("marker")
    if kind is None:
        seq: int = shown["seq"]
        return seq
    low, high = shown["hides"] if kind == "elision" else (None, None)
    return low if low is not None and low == high else None
