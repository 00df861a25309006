"""What a compaction would hide, decided on an index of the effective context. Pure.

A plan is a span of consecutive visible entries, turned into a marker's ``hides`` range of
positions. No span ever separates an assistant's tool calls from their results: a span never
starts on a tool result, and never ends just before one.
"""

from dataclasses import dataclass
from typing import Any, Final

from app.context.effective import COMPACTION_KINDS, MASKED_BY, marker_kind, position
from app.context.records import record_tokens

# A compaction marker's field: how many messages it hides (markers written before it was
# stored count as one each, as they were counted then).
HIDDEN_MESSAGES: Final = "hidden_messages"
# The most user messages before the agent's first reply that the instruction takes in.
MAX_INSTRUCTION_MESSAGES = 8
# Markers that stand for what they hide (a summary, a truncation's list of facts): cut last.
MEMORY_KINDS = ("condense", "truncation")
# The text an elision leaves of a message, at the least: its start and end, this many tokens
# together (enough to say what the message was).
ELIDED_TEXT_TOKENS = 32


@dataclass(frozen=True)
class Entry:
    """One visible message of the effective context (a record or a compaction marker)."""

    position: int
    seq: int
    role: str
    tokens: int
    marker: str | None
    last: int | None = None  # a compaction marker: the last position it stands for (hides[1])
    messages: int = 1  # the messages it stands for: a compaction marker's, those it hides
    masked: bool = False  # a tool result shown as a placeholder

    @classmethod
    def of(cls, record: dict[str, Any], fmt: str = "openai") -> "Entry":
        """The entry of a visible record, its tokens as ``fmt`` renders it."""
        kind = marker_kind(record)
        return cls(
            position=position(record),
            seq=record["seq"],
            role=record["role"],
            tokens=record_tokens(record, fmt),
            marker=kind,
            last=record["hides"][1] if kind in COMPACTION_KINDS else None,
            messages=record.get(HIDDEN_MESSAGES, 1) if kind in COMPACTION_KINDS else 1,
            masked=MASKED_BY in record,
        )


@dataclass(frozen=True)
class Span:
    start: int  # index of the first hidden entry
    end: int  # index after the last hidden entry

    def hides(self, entries: list[Entry]) -> tuple[int, int]:
        """Positions from the first entry to the end of the last one: a marker at the end of
        the span takes what it hid along (else those records would show again)."""
        last = entries[self.end - 1]
        return entries[self.start].position, last.position if last.last is None else last.last

    def tokens(self, entries: list[Entry]) -> int:
        return sum(e.tokens for e in entries[self.start : self.end])

    def messages(self, entries: list[Entry]) -> int:
        """The messages a marker over the span hides: an earlier marker in it is no message,
        it stands for the messages it hid (which the new marker now hides)."""
        return sum(e.messages for e in entries[self.start : self.end])


@dataclass(frozen=True)
class Skip:
    reason: str


def head_length(entries: list[Entry]) -> int:
    """Leading system messages and the task instruction after them: the user messages before
    the agent's first reply (an agent may give a demonstration, then the task; at most
    ``MAX_INSTRUCTION_MESSAGES``, so a stream of user messages alone still has the rest to
    compact), or the first message with its tool results if it is an assistant's call (a
    rewind can leave one first: a compaction after the head never starts between a call and
    its results)."""
    index = 0
    while index < len(entries) and entries[index].role == "system":
        index += 1
    end = min(index + 1, len(entries))
    while end < len(entries) and entries[end].role == "tool":
        end += 1
    if entries[index : index + 1] and entries[index].role == "user":
        run = end
        # A message, maybe cut by an elision; never a summary or a truncation marker.
        while (
            run < len(entries)
            and entries[run].role == "user"
            and entries[run].marker not in MEMORY_KINDS
        ):
            run += 1
        end = min(run, index + MAX_INSTRUCTION_MESSAGES)
    return end


def kept_length(entries: list[Entry]) -> int:
    """What truncation never hides: the head, and everything up to the newest condense summary
    (the memory of all that came before it; a condense puts it right after the head)."""
    head = head_length(entries)
    summaries = [i for i, e in enumerate(entries) if e.marker == "condense" and i >= head]
    return max(head, summaries[-1] + 1) if summaries else head


def kept_instruction(entries: list[Entry]) -> Entry | None:
    """The task statement, which the context keeps (the summariser gets it for reference): the
    last user message of the head, after any demonstration."""
    users = [e for e in entries[: head_length(entries)] if e.role == "user"]
    return users[-1] if users else None


def plan_mask(entries: list[Entry], *, keep_tool_results: int) -> list[int]:
    """Indexes of the tool results to mask: every one not masked yet but the newest
    ``keep_tool_results`` (results still open to the model's next step stay whole); a result
    an elision cut counts as one."""
    results = [
        i for i, e in enumerate(entries) if e.role == "tool" and e.marker in (None, "elision")
    ]
    older = results[: max(0, len(results) - keep_tool_results)]
    return [i for i in older if not entries[i].masked]


def _pair_safe(entries: list[Entry], start: int, end: int) -> Span:
    while start < end and entries[start].role == "tool":
        start += 1
    while end > start and end < len(entries) and entries[end].role == "tool":
        end -= 1  # keep the assistant's call with its results, after the span
    return Span(start, end)


def plan_condense(
    entries: list[Entry], *, keep_recent: int, min_to_compress: int, room: int | None = None
) -> Span | Skip:
    """Condense, as Roo Code's summarizeConversation: keep the head and the last
    ``keep_recent`` entries; fewer when they cost more than ``room`` tokens (what the context
    may keep beside its head and the summary and still leave room for the next turns), but
    always the newest."""
    head = head_length(entries)
    kept = min(keep_recent, len(entries) - head)
    if room is not None:
        while kept > 1 and sum(e.tokens for e in entries[len(entries) - kept :]) > room:
            kept -= 1
    span = _pair_safe(entries, head, max(head, len(entries) - kept))
    if any(e.marker == "condense" for e in entries[span.end :]):
        return Skip("recently_condensed")
    if span.end - span.start < min_to_compress:
        return Skip("too_few_messages")
    return span


def plan_truncate(entries: list[Entry]) -> Span | Skip:
    """Truncate, as Roo Code's sliding window: hide half of the entries after the head, an
    even count; the newest summary stays (the head here ends after it)."""
    head = kept_length(entries)
    count = (len(entries) - head) // 2
    count -= count % 2
    if count == 0:
        return Skip("nothing_to_truncate")
    span = _pair_safe(entries, head, head + count)
    if all(e.marker for e in entries[span.start : span.end]):
        # Moving the end back before a call left only markers, whose hiding gains nothing:
        # take the call and its results along instead, if anything remains after them.
        span = _with_results(entries, span.start, head + count)
    if span.end <= span.start:
        return Skip("nothing_to_truncate")
    return span


def _with_results(entries: list[Entry], start: int, end: int) -> Span:
    if start < len(entries) and entries[start].role == "tool":
        return Span(start, start)  # results without their call: never a span
    while end < len(entries) and entries[end].role == "tool":
        end += 1
    return Span(start, end) if end < len(entries) else Span(start, start)


def elision_order(entries: list[Entry], *, minimum: int = 0) -> tuple[list[int], list[int]]:
    """Indexes of the entries over ``minimum`` tokens, the candidates for an elision, in two
    groups tried in turn: the messages after what truncation keeps, largest first; then the
    head (system messages, the task instruction), where the largest gives way first (a system
    prompt larger than the budget is cut before a short task statement, a long demonstration
    before a short system prompt: else the task could only be refused, or its statement cut to
    nothing beside a prompt that dwarfs it), and last of all the summaries and truncation
    markers (the memory of everything they hide, already bounded)."""
    kept = kept_length(entries)
    candidates = sorted(
        (i for i, e in enumerate(entries) if e.tokens > minimum), key=lambda i: -entries[i].tokens
    )
    recent = [
        i
        for i in candidates
        if i >= kept and entries[i].role != "system" and entries[i].marker not in MEMORY_KINDS
    ]
    others = set(recent)
    lasting = [i for i in candidates if i not in others]
    return recent, sorted(lasting, key=lambda i: entries[i].marker in MEMORY_KINDS)
