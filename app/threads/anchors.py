"""Anchors: the mark a thread leaves in its parent's context. Pure.

Starting a thread appends an anchor record to the parent: a system message holding the one
line, with ``stelis_anchor`` (the thread's id) kept on its current.jsonl line. Whenever a
context is assembled the anchor is rendered anew for whoever looks: in full (label, id, start,
end or "in progress", message count, chronicle, latest exchanges) from outside the thread, as
its one line from the thread itself or a descendant (the viewer's chain of ancestors says).

An anchor's stored cost is :data:`app.context.records.ANCHOR_TOKENS` (or its one line's, if
more) in every format, and a full rendering is cut until it costs no more than that: the sums
the budget checks use stay upper bounds whatever the thread has become since.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from app.budgets.windows import Ratioed, chain_of
from app.context.records import ANCHOR

_ANCHOR_LINE = re.compile(rb',"stelis_anchor":(\d+)\}\n?$')
EXCHANGE_CHARS = 200
CHRONICLE_CHARS = 1200
# Tried in turn until the rendering fits: (characters of the chronicle, latest exchanges).
_SHAPES = ((CHRONICLE_CHARS, 3), (600, 2), (300, 1), (120, 0), (0, 0))


@dataclass(frozen=True)
class AnchorFacts:
    """What a full anchor shows about its thread, read when a context is assembled."""

    thread_id: int
    label: str | None
    status: str
    created_at: datetime
    completed_at: datetime | None
    message_count: int
    chronicle: str | None
    exchanges: list[tuple[str, str]]  # (role, text) of its latest messages, oldest first


def anchor_id(line: bytes) -> int | None:
    """The thread of an anchor's current.jsonl line; None for any other line. The key ends
    the line (records.openai_message puts it last), so no message content can fake it."""
    found = _ANCHOR_LINE.search(line)
    return int(found.group(1)) if found else None


def one_line(thread_id: int, label: str | None) -> str:
    name = f"{label} " if label else ""
    return f"[Thread {name}(#{thread_id}) started]"


def seen_from_inside(viewing: int, anchor: int, threads: Mapping[int, Ratioed]) -> bool:
    """Whether the viewer is the anchor's thread or below it (in its chain of ancestors)."""
    return viewing == anchor or anchor in chain_of(viewing, threads)


def full_text(facts: AnchorFacts, chronicle_chars: int, exchanges: int) -> str:
    if facts.status == "active":
        ended = "in progress"
    else:
        when = _when(facts.completed_at) if facts.completed_at else "unknown"
        ended = when if facts.status == "completed" else f"aborted {when}"
    lines = [
        f"[Thread: {facts.label or f'#{facts.thread_id}'}]",
        f"- ID: {facts.thread_id}",
        f"- Started: {_when(facts.created_at)}",
        f"- Ended: {ended}",
        f"- Messages: {facts.message_count}",
    ]
    if facts.chronicle and chronicle_chars:
        chronicle = facts.chronicle.strip()
        if len(chronicle) > chronicle_chars:
            chronicle = chronicle[:chronicle_chars].rstrip() + " [...]"
        lines += ["", "## Chronicle", chronicle]
    if facts.exchanges and exchanges:
        lines += ["", "## Latest exchanges"]
        for role, text in facts.exchanges[-exchanges:]:
            text = " ".join(text.split())
            if len(text) > EXCHANGE_CHARS:
                text = text[:EXCHANGE_CHARS].rstrip() + " [...]"
            lines.append(f"[{role}]: {text}")
    return "\n".join(lines)


def rendered_line(
    facts: AnchorFacts, *, full: bool, fits: Callable[[dict[str, Any]], bool]
) -> bytes:
    """The anchor as a current.jsonl line: full if asked and it fits (shorter shapes first
    cut its chronicle and exchanges), else its one line."""
    if full:
        for chronicle_chars, exchanges in _SHAPES:
            message = system_message(full_text(facts, chronicle_chars, exchanges))
            if fits(message):
                return orjson.dumps(message) + b"\n"
    return orjson.dumps(system_message(one_line(facts.thread_id, facts.label))) + b"\n"


def system_message(content: str) -> dict[str, Any]:
    return {"role": "system", "content": content}


def substitute(chunk: bytes, renderings: Mapping[int, bytes]) -> bytes:
    """The chunk (whole lines) with every anchor line replaced by its rendering."""
    if b'"stelis_anchor":' not in chunk:  # the usual case: nothing to look at
        return chunk
    out = []
    for line in chunk.split(b"\n")[:-1]:
        thread_id = anchor_id(line)
        if thread_id is None:
            out.append(line + b"\n")
        else:
            out.append(renderings.get(thread_id) or _without_key(line))
    return b"".join(out)


def with_anchors(
    render: Callable[[bytes, bool], bytes], renderings: Mapping[int, bytes]
) -> Callable[[bytes, bool], bytes]:
    """``render`` fed chunks whose anchor lines are replaced by their renderings."""
    return lambda chunk, last: render(substitute(chunk, renderings), last)


def _without_key(line: bytes) -> bytes:
    message = orjson.loads(line)
    message.pop(ANCHOR, None)
    return orjson.dumps(message) + b"\n"


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
