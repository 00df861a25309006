"""Putting the pinned plan into a payload as it streams: right after the first user message
(or at the end of a context that has none yet)."""

from collections.abc import Callable
from typing import Any

import orjson

from app.db.models import Task

Render = Callable[[bytes, bool], bytes]


def pinned_message(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def pinned_line(task: Task) -> bytes | None:
    """The pinned plan as a current.jsonl line, if the task pins one."""
    if not task.pin_plan or not task.pinned_plan:
        return None
    return orjson.dumps(pinned_message(task.pinned_plan)) + b"\n"


def with_pinned(render: Render, line: bytes | None) -> Render:
    """``render`` fed the pinned line after the first user line of the chunks it is given; or
    before the first line that is neither system nor user, when that comes first (never after
    an assistant's tool calls: their results must follow them); or at the end of a context of
    system messages only."""
    if line is None:
        return render
    placed = False

    def feed(chunk: bytes, last: bool) -> bytes:
        nonlocal placed
        if not placed:
            chunk, placed = _insert(chunk, line)
            if last and not placed:
                chunk, placed = chunk + line, True
        return render(chunk, last)

    return feed


def _insert(chunk: bytes, line: bytes) -> tuple[bytes, bool]:
    start = 0
    while (end := chunk.find(b"\n", start)) != -1:
        role = _role(chunk[start:end])
        if role == "user":
            return chunk[: end + 1] + line + chunk[end + 1 :], True
        if role != "system":
            return chunk[:start] + line + chunk[start:], True
        start = end + 1
    return chunk, False


def _role(current: bytes) -> str:
    # current.jsonl lines are app/context/records.py openai_message dicts: the role comes first.
    for role in ("user", "system"):
        if current.startswith(b'{"role":"%s"' % role.encode()):
            return role
    return "other"
