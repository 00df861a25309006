"""What the ops page draws, as coordinates for inline SVG: the context window (a bar per
message) and the bar charts of the statistics over time. Pure: no I/O, no HTML."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.context.effective import COMPACTION_KINDS, MASKED_BY, marker_kind
from app.context.records import ANCHOR, record_tokens

# What a bar of the context stands for: a message as posted, or what a compaction left.
BarKind = Literal["message", "masked", "summarised", "truncated", "elided", "anchor"]
MARKER_BARS: dict[str, BarKind] = {
    "condense": "summarised",
    "truncation": "truncated",
    "elision": "elided",
}
PREVIEW_CHARS = 160
WIDTH = 1000  # the SVG's user units; the browser scales it to the page


@dataclass(frozen=True)
class ContextEntry:
    """One record of the effective context, as the picture needs it."""

    seq: int  # the record's seq (a compaction marker's: the first seq it hides)
    role: str
    kind: BarKind
    tokens: int
    hidden_messages: int  # a summary's or truncation's: the messages it stands for
    preview: str


@dataclass(frozen=True)
class Bar:
    entry: ContextEntry
    x: float
    width: float


@dataclass(frozen=True)
class ContextPicture:
    bars: list[Bar]
    other_x: float  # tools and the pinned plan: counted, but no message of the context
    other_width: float
    budget_x: float
    threshold_x: float
    scale: int  # tokens across the whole width


@dataclass(frozen=True)
class ChartBar:
    label: str
    value: int
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class BarChart:
    title: str
    bars: list[ChartBar]
    peak: int
    first: str
    last: str
    width: int
    height: int


def context_entry(record: dict[str, Any], fmt: str) -> ContextEntry:
    """A visible record (app/context/effective.py) as a bar of the picture."""
    kind = marker_kind(record)
    bar: BarKind = "message"
    seq: int = record["seq"]
    if kind in COMPACTION_KINDS:
        bar = MARKER_BARS[kind]
        seq = record["hides"][0]
    elif MASKED_BY in record:
        bar = "masked"
    elif ANCHOR in record:
        bar = "anchor"
    return ContextEntry(
        seq=seq,
        role=str(record.get("role") or "marker"),
        kind=bar,
        tokens=record_tokens(record, fmt),
        hidden_messages=int(record.get("hidden_messages") or 0) if kind else 0,
        preview=preview(record),
    )


def preview(record: dict[str, Any]) -> str:
    """The start of a record's text, on one line (a call's names when it has no text)."""
    content = record.get("content")
    if isinstance(content, list):
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    text = " ".join(str(content or "").split())
    if not text and record.get("tool_calls"):
        names = [str(c.get("function", {}).get("name", "?")) for c in record["tool_calls"]]
        text = "calls " + ", ".join(names)
    return text[:PREVIEW_CHARS] + ("…" if len(text) > PREVIEW_CHARS else "")


def context_picture(
    entries: Sequence[ContextEntry], total_tokens: int, budget: int, threshold: int
) -> ContextPicture:
    """The context as one strip: each message a bar as wide as its tokens, then what the
    payload counts beside them (tools, a pinned plan), against the budget and threshold."""
    scale = max(total_tokens, budget, 1)
    scale = int(scale * 1.05)  # room to the right of the budget line
    per_token = WIDTH / scale
    bars, x = [], 0.0
    for entry in entries:
        width = entry.tokens * per_token
        bars.append(Bar(entry=entry, x=round(x, 2), width=round(max(width, 0.5), 2)))
        x += width
    other = max(total_tokens - sum(e.tokens for e in entries), 0)
    return ContextPicture(
        bars=bars,
        other_x=round(x, 2),
        other_width=round(other * per_token, 2),
        budget_x=round(budget * per_token, 2),
        threshold_x=round(threshold * per_token, 2),
        scale=scale,
    )


def bar_chart(
    title: str, points: Sequence[tuple[str, int]], width: int = 600, height: int = 160
) -> BarChart:
    """Bars of ``points`` (label, value) side by side, the tallest as high as the chart."""
    peak = max((value for _, value in points), default=0)
    step = width / max(len(points), 1)
    bars = []
    for i, (label, value) in enumerate(points):
        bar_height = height * value / peak if peak else 0.0
        bars.append(
            ChartBar(
                label=label,
                value=value,
                x=round(i * step, 2),
                y=round(height - bar_height, 2),
                width=round(max(step * 0.8, 0.5), 2),
                height=round(bar_height, 2),
            )
        )
    return BarChart(
        title=title,
        bars=bars,
        peak=peak,
        first=points[0][0] if points else "",
        last=points[-1][0] if points else "",
        width=width,
        height=height,
    )
