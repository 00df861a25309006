"""The inherited context message and the notification comment. Pure."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from app.planning.items import entry_items, render_items
from app.tokens.cutting import cut

HEADER = "[Context inherited from a previous run of this task]"
CONTINUE = (
    "Continue the task from where the previous run left off: build on the work above, do not "
    "repeat what was already done, and address what remained or went wrong."
)
SOURCE_NOTES = {
    "final_summary": "",
    "condense_summary": "The previous run's final summary was not ready in time: below is the "
    "latest summary of its context instead.",
    "none": "No summary of the previous run is available.",
}
CARRIED = {
    "final_summary": "Its final summary and planning history were carried into this run's context.",
    "condense_summary": "Its latest context summary (the final one was not ready) and planning "
    "history were carried into this run's context.",
    "none": "No summary of it was available; its planning history was carried over.",
}
CUT_NOTE = "[Inherited context cut to fit {limit} tokens: {what}.]"


@dataclass(frozen=True)
class Previous:
    """The earlier run being inherited from, and what it left behind."""

    uuid: str
    status: str
    completed_at: datetime | None
    error_message: str | None
    summary: str | None
    summary_source: str  # final_summary | condense_summary | none
    planning: list[dict[str, Any]]  # the latest entries, oldest first
    planning_dropped: int  # older entries left out before formatting


def brief(error: str | None, limit: int = 300) -> str:
    """An error message's first line, at most ``limit`` characters (a traceback can be long;
    the final summary has the rest)."""
    lines = (error or "").strip().splitlines()
    if not lines:
        return "(none given)"
    first = lines[0]
    return first if len(first) <= limit and len(lines) == 1 else first[:limit] + " [...]"


def when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "unknown time"


def planning_entry(entry: dict[str, Any]) -> str:
    """A planning entry as the inherited message shows it: its time, type and content."""
    content = entry.get("plan_content")
    if not isinstance(content, str):
        content = orjson.dumps(content, option=orjson.OPT_INDENT_2).decode()
    items = entry_items(entry)
    if items is not None:
        content = f"{content}\n{render_items(items)}" if content else render_items(items)
    return f"- [{entry.get('created_at', '')}] {entry.get('plan_type', '')}:\n{content}"


def latest_entries(count: Callable[[str], int], entries: list[str], room: int) -> list[str]:
    """The latest whole entries within ``room`` tokens; if not even the last one fits, its
    beginning."""
    kept: list[str] = []
    used = 0
    for entry in reversed(entries):
        # Each entry counted once, and a token for its newline (not the whole text anew each
        # time); the caller trims what the joined count differs by.
        cost = count(entry) + (1 if kept else 0)
        if used + cost > room:
            break
        kept.insert(0, entry)
        used += cost
    if not kept and entries:
        kept = [cut(count, entries[-1], room)] if room > 0 else []
    return kept


def inherited_message(
    previous: Previous, limit: int, count: Callable[[str], int]
) -> tuple[str, dict[str, Any]]:
    """The initial context message, at most ``limit`` tokens, and what it holds.

    When summary and planning do not both fit, the planning history keeps its latest whole
    entries (in at least a third of the room, or what the summary leaves) and the summary its
    beginning.
    """
    opening = [
        HEADER,
        f"Previous run: task {previous.uuid}, {previous.status} at {when(previous.completed_at)}.",
    ]
    if previous.status == "failed":
        opening.append(f"It failed with this error: {brief(previous.error_message)}")
    if SOURCE_NOTES[previous.summary_source]:
        opening.append(SOURCE_NOTES[previous.summary_source])

    original = previous.summary or ""
    entries = [planning_entry(entry) for entry in previous.planning]

    def cuts_of(summary: str, planning: list[str]) -> list[str]:
        """What the note says was cut: derived from what is left."""
        found = []
        if previous.planning_dropped:
            found.append(f"{previous.planning_dropped} older planning entries left out")
        if summary != original:
            found.append("the summary's end")
        if planning != entries:
            found.append("older planning history")
        return found

    def compose(summary: str, planning: list[str], cuts: list[str] | None = None) -> str:
        cuts = cuts_of(summary, planning) if cuts is None else cuts
        parts = ["\n".join(opening)]
        if summary:
            parts.append(f"## Summary of the previous run\n{summary}")
        if planning:
            parts.append("## Planning history\n" + "\n".join(planning))
        if cuts:
            parts.append(CUT_NOTE.format(limit=limit, what="; ".join(cuts)))
        parts.append(CONTINUE)
        return "\n\n".join(parts)

    summary, planning = original, entries
    if count(compose(summary, planning)) > limit:
        longest_note = cuts_of("", [])  # every cut named: the most the note can cost
        room = limit - count(compose("x", ["x"], longest_note))
        summary_tokens, planning_tokens = count(summary), count("\n".join(entries))
        planning_room = min(planning_tokens, max(room // 3, room - summary_tokens))
        planning = latest_entries(count, entries, planning_room)
        summary = cut(count, summary, max(room - count("\n".join(planning)), 0))
        for _ in range(8):  # counts of joined text differ slightly from sums: trim the rest
            over = count(compose(summary, planning)) - limit
            if over <= 0:
                break
            if summary:
                summary = cut(count, summary, max(count(summary) - over - 1, 0))
            else:
                planning = latest_entries(count, planning[1:], count("\n".join(planning)))
    # The guarantee, should the headings alone be too long.
    text = cut(count, compose(summary, planning), limit)
    return text, {
        "summary_source": previous.summary_source,
        "planning_entries": len(previous.planning) + previous.planning_dropped,
        "truncated": bool(cuts_of(summary, planning)),
        "tokens": count(text),
    }


def notification_comment(previous: Previous) -> str:
    """The notification comment, for the agent to post on the issue it works on."""
    lines = [
        f"Continuing from a previous run of this task: {previous.uuid} ({previous.status}, "
        f"finished {when(previous.completed_at)}).",
        CARRIED[previous.summary_source],
    ]
    if previous.status == "failed" and previous.error_message:
        lines.append(f"The previous run failed: {brief(previous.error_message)}")
    return "\n".join(lines)
