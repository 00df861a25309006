"""The shapes of the records the service writes itself: markers in messages.jsonl and their
summaries.jsonl records. A posted message keeps whatever fields its client gave it, so message
records stay open dicts; these are closed, and typed."""

from typing import Any, Literal, NotRequired, Required, TypedDict

MarkerKind = Literal["condense", "truncation", "elision", "mask", "rewind", "lost"]


class MaskedResult(TypedDict):
    """One tool result a mask marker hides: its seq and the placeholder shown instead, with
    the placeholder's cost."""

    seq: int
    content: str
    tokens: int
    format_tokens: dict[str, int]


class Marker(TypedDict, total=False):
    """A marker record of messages.jsonl (``type`` "marker"). A condense, truncation or elision
    marker is also a message (role and content: what the payload shows in place of those it
    hides); a mask lists the results it hides; a rewind names where the context goes back to;
    ``lost`` records seqs an operator accepted as lost."""

    marker: Required[MarkerKind]
    seq: int  # given when appended
    type: str
    timestamp: str
    tokens: int  # as OpenAI counts what it shows
    format_tokens: dict[str, int]
    summary_id: int  # its summaries.jsonl record
    # condense, truncation, elision: the message shown, and the seqs it hides
    role: str
    content: Any
    tool_calls: list[dict[str, Any]]
    tool_call_id: str
    name: str
    tool_name: str
    hides: list[int]
    hidden_messages: int
    # mask
    masks: list[MaskedResult]
    # rewind
    to_seq: int
    include_target: bool
    # lost
    lost: list[int]


class SummaryRecord(TypedDict):
    """A line of summaries.jsonl: what one compaction did, its token figures as ``counted_as``
    renders the context."""

    kind: str
    start_seq: int
    end_seq: int
    summary: str
    original_tokens: int
    summary_tokens: int
    ratio: float
    compressed_message_count: int
    tokens_saved: int
    summarizer: str | None
    counted_as: str
    created_at: str
    timestamp: str
    masked_seqs: NotRequired[list[int]]  # a mask's
    duration_ms: NotRequired[float]  # from the compaction's start to this record
    id: NotRequired[int]  # given when appended
    marker_seq: NotRequired[int]
