"""Plan items: the checklist a planning entry may carry, each item with its status.

The current items are those of the latest entry that carries ``items`` (an empty list clears
them): an entry without items, a free-text note, leaves the checklist as it was. They are
written one way everywhere the plan is shown again: the pinned plan, the condense prompt and
the extractive digest, so a finished item reads as finished in each. Pure, apart from
``latest_items``, which reads planning.jsonl.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from app.storage.jsonl import iter_lines_backward

PlanStatus = Literal["pending", "active", "done", "cancelled"]
OPEN_STATUSES = frozenset({"pending", "active"})  # what may still be a next step
_MARKS: dict[PlanStatus, str] = {
    "pending": "[ ]",
    "active": "[>]",
    "done": "[x]",
    "cancelled": "[-]",
}
_SUFFIXES: dict[PlanStatus, str] = {"active": " (active)", "cancelled": " (cancelled)"}
TITLE = "Plan:"


@dataclass(frozen=True)
class ChecklistItem:
    id: str
    text: str
    status: PlanStatus


@dataclass(frozen=True)
class CurrentItems:
    """The current items and the planning entry that set them."""

    entry_id: int
    items: tuple[ChecklistItem, ...]


def entry_items(entry: dict[str, Any]) -> tuple[ChecklistItem, ...] | None:
    """A stored entry's items; None when it carries none (a free-text entry)."""
    raw = entry.get("items")
    if raw is None:
        return None
    return tuple(ChecklistItem(str(i["id"]), str(i["text"]), i["status"]) for i in raw)


def item_line(item: ChecklistItem) -> str:
    """``[x] 1. write tests``, ``[>] 2. fix parser (active)``, ``[-] 4. old idea (cancelled)``."""
    return f"{_MARKS[item.status]} {item.id}. {item.text}{_SUFFIXES.get(item.status, '')}"


def render_items(items: Iterable[ChecklistItem]) -> str:
    """The checklist under its title, one item a line."""
    return "\n".join([TITLE, *(item_line(item) for item in items)])


def open_items(items: Iterable[ChecklistItem]) -> list[ChecklistItem]:
    """The items that are neither done nor cancelled, in plan order."""
    return [item for item in items if item.status in OPEN_STATUSES]


def latest_items(path: Path) -> CurrentItems | None:
    """The current items of a planning.jsonl: those of its latest entry that carries items,
    read backwards a block at a time."""
    return current_plan(path)[1]


def current_plan(path: Path) -> tuple[dict[str, Any] | None, CurrentItems | None]:
    """The latest entry of a planning.jsonl and the current items, read backwards a block at
    a time up to the latest entry that carries items."""
    if not path.exists():
        return None, None
    latest: dict[str, Any] | None = None
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(max(size - 1, 0))
        torn = f.read(1) not in (b"\n", b"")
        lines = iter_lines_backward(f, size)
        if torn:
            next(lines, None)  # a torn last line (the next append repairs it) is no entry
        for line in lines:
            record = orjson.loads(line)
            latest = latest or record
            items = entry_items(record)
            if items is not None:
                return latest, CurrentItems(int(record["id"]), items)
    return latest, None
