"""Message records and the context head, in pure code (but for the clock of their timestamps).

A record is a line of ``messages.jsonl``: ``seq``, the message as posted (OpenAI shape plus
``tool_name`` and any extras), ``timestamp`` and ``tokens``. The first record of a batch may
carry ``batch_size`` (so recovery can tell a torn batch) and ``idempotency_key``/``request_hash``
(so recovery can re-register a key whose commit was cut short).

The current line of a record is the message in OpenAI's request shape, one line of
``current.jsonl``; a payload is those lines joined.
"""

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from app.context.effective import MASKED_BY, is_marker
from app.errors import Conflict, ErrorCode, InvalidInput, TooLarge
from app.formats.costs import OTHER_FORMATS, TokenCosts, in_format
from app.storage.jsonl import dumps_line
from app.tokens.calibration import reported_output_tokens, reported_prompt_tokens

# A thread's anchor in its parent's context (app/threads/anchors.py): the thread's id.
ANCHOR = "stelis_anchor"
# What an anchor is counted as, in every format: the most any rendering of it may cost.
ANCHOR_TOKENS = 400

# Fields the service writes into records (the envelope of a message, and every field a marker
# is read by): a posted message may carry none of them, so no client body can pass for a record
# the service wrote, and the history shows only what was posted besides the envelope.
RESERVED_FIELDS = frozenset(
    {
        "seq",
        "type",
        "timestamp",
        "tokens",
        "format_tokens",
        "batch_size",
        "idempotency_key",
        "request_hash",
        "marker",
        "hides",
        "hidden_messages",
        "lost",
        "to_seq",
        "include_target",
        "summary_id",
        MASKED_BY,
        ANCHOR,
    }
)


def utc_timestamp() -> str:
    """A record's ``timestamp``: now, in UTC, to the microsecond."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def refuse_reserved(messages: list[dict[str, Any]]) -> None:
    """InvalidInput (nothing written) if a posted message carries a reserved field."""
    for index, message in enumerate(messages):
        clash = sorted(RESERVED_FIELDS.intersection(message))
        if clash:
            raise InvalidInput(
                f"message {index}: {', '.join(map(repr, clash))} "
                f"{'is a field' if len(clash) == 1 else 'are fields'} the service writes itself; "
                "a message may not carry them (rename or drop them)",
                code=ErrorCode.RESERVED_FIELD,
                details={"index": index, "fields": clash, "reserved": sorted(RESERVED_FIELDS)},
            )


@dataclass
class HeadState:
    """Mirror of a context_heads row: where the committed context ends."""

    last_seq: int = 0
    messages_bytes: int = 0
    current_bytes: int = 0
    current_messages: int = 0
    context_tokens: int = 0  # as OpenAI renders the context
    open_tool_calls: list[list[str]] = field(default_factory=list)
    format_tokens: dict[str, int] = field(default_factory=dict)  # as the other formats do

    @property
    def extent(self) -> tuple[int, int, int]:
        """How far the head reaches into its context's append-only files (its other figures
        follow from what they hold up to there)."""
        return self.last_seq, self.messages_bytes, self.current_bytes

    def tokens(self, fmt: str) -> int:
        """The context's tokens as ``fmt`` ("openai", "anthropic", "ollama") renders it."""
        return in_format(self.context_tokens, self.format_tokens, fmt)

    def copy(self) -> "HeadState":
        """A copy whose list and dict change apart from this one's."""
        return dataclasses.replace(
            self,
            open_tool_calls=[list(call) for call in self.open_tool_calls],
            format_tokens=dict(self.format_tokens),
        )

    def add_tokens(self, record: dict[str, Any]) -> None:
        self.format_tokens = {
            fmt: self.tokens(fmt) + record_tokens(record, fmt) for fmt in OTHER_FORMATS
        }
        self.context_tokens += record["tokens"]


def record_tokens(record: dict[str, Any], fmt: str) -> int:
    """A record's cost as ``fmt`` renders it (records older than per-format counts: OpenAI's)."""
    return in_format(record["tokens"], record.get("format_tokens") or {}, fmt)


@dataclass
class StatsDelta:
    messages: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    usage_tokens: int = 0
    # The prompt tokens the newest assistant message reported (for calibration).
    reported_prompt_tokens: int | None = None

    def add(self, other: "StatsDelta") -> "StatsDelta":
        return StatsDelta(
            self.messages + other.messages,
            self.llm_calls + other.llm_calls,
            self.tool_calls + other.tool_calls,
            self.usage_tokens + other.usage_tokens,
            other.reported_prompt_tokens or self.reported_prompt_tokens,
        )


@dataclass(frozen=True)
class IdempotentResult:
    key: str
    request_hash: str
    response: dict[str, Any]


def request_hash(messages: list[dict[str, Any]]) -> str:
    return hashlib.sha256(orjson.dumps(messages, option=orjson.OPT_SORT_KEYS)).hexdigest()


def openai_message(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record as an OpenAI chat message: only fields the request schema allows."""
    role = record["role"]
    message: dict[str, Any] = {"role": role, "content": record.get("content")}
    if role != "tool" and record.get("name"):
        message["name"] = record["name"]
    if role == "assistant" and record.get("tool_calls"):
        message["tool_calls"] = record["tool_calls"]
    if role == "tool":
        message["tool_call_id"] = record["tool_call_id"]
    if ANCHOR in record:  # last, where app/threads/anchors.py looks for it
        message[ANCHOR] = record[ANCHOR]
    return message


def current_line(record: dict[str, Any]) -> bytes:
    return dumps_line(openai_message(record))


class ContextAccumulator:
    """Advances a head record by record; validates new messages before admitting them."""

    def __init__(self, head: HeadState) -> None:
        self.head = head.copy()
        self.stats = StatsDelta()

    def admit(self, record: dict[str, Any], record_line: bytes) -> bytes:
        """Account for a record already validated (or already on disk); return its current line."""
        head = self.head
        line = current_line(record)
        head.last_seq = record["seq"]
        head.messages_bytes += len(record_line)
        head.current_bytes += len(line)
        head.current_messages += 1
        head.add_tokens(record)
        advance_tool_calls(head.open_tool_calls, record)
        count_record(self.stats, record)
        return line

    def prepare(
        self,
        messages: list[dict[str, Any]],
        *,
        costs: TokenCosts,
        timestamp: str,
        max_message_bytes: int,
        idempotency_key: str | None = None,
    ) -> list[tuple[dict[str, Any], bytes]]:
        """Turn a batch into records, all or nothing; raises before admitting any of them."""
        open_calls = [list(call) for call in self.head.open_tool_calls]
        prepared = []
        for index, fields in enumerate(messages):
            record = {"seq": self.head.last_seq + index + 1, **fields}
            _check_pairing(open_calls, record, index)
            record["timestamp"] = timestamp
            record["tokens"], record["format_tokens"] = costs.message(openai_message(record))
            if ANCHOR in record:  # rendered anew each time: counted as the most it may cost
                record["tokens"] = max(record["tokens"], ANCHOR_TOKENS)
                record["format_tokens"] = {
                    f: max(n, ANCHOR_TOKENS) for f, n in record["format_tokens"].items()
                }
            if index == 0 and len(messages) > 1:
                record["batch_size"] = len(messages)
            if index == 0 and idempotency_key is not None:
                record["idempotency_key"] = idempotency_key
                record["request_hash"] = request_hash(messages)
            line = dumps_line(record)
            if len(line) > max_message_bytes:
                raise TooLarge(
                    f"message {index} is {len(line)} bytes; the limit is {max_message_bytes}",
                    code=ErrorCode.MESSAGE_TOO_LARGE,
                    details={"index": index, "bytes": len(line), "limit": max_message_bytes},
                )
            advance_tool_calls(open_calls, record)
            prepared.append((record, line))
        return prepared


def count_record(stats: StatsDelta, record: dict[str, Any]) -> None:
    """Add a message record to the task statistics (markers are not messages)."""
    if is_marker(record):
        return
    stats.messages += 1
    if record["role"] == "assistant":
        stats.tool_calls += len(record.get("tool_calls") or ())
        usage = record.get("usage")
        if isinstance(usage, dict):
            prompt = reported_prompt_tokens(usage)
            stats.llm_calls += 1
            stats.usage_tokens += (prompt or 0) + reported_output_tokens(usage)
            if prompt:
                stats.reported_prompt_tokens = prompt


def _check_pairing(open_calls: list[list[str]], record: dict[str, Any], index: int) -> None:
    """Keep every payload valid: results answer open calls, nothing else interrupts them, and
    a call id is never open twice (a result could not say which call it answers)."""
    call_ids = [call["id"] for call in record.get("tool_calls") or ()]
    if len(set(call_ids)) < len(call_ids):
        repeated = sorted({i for i in call_ids if call_ids.count(i) > 1})
        raise InvalidInput(
            f"message {index}: tool call ids {repeated} appear more than once; each call of a "
            "message needs an id of its own",
            code=ErrorCode.DUPLICATE_TOOL_CALL_ID,
            details={"index": index, "tool_call_ids": repeated},
        )
    if record["role"] == "tool":
        call_id = record.get("tool_call_id")
        if call_id is None:  # named only (as Ollama's clients send results): the oldest call
            name = record["tool_name"]
            match = next((call for call in open_calls if call[1] == name), None)
            if match is None:
                raise InvalidInput(
                    f"message {index}: tool_name {name!r} answers no open assistant tool call",
                    code=ErrorCode.UNKNOWN_TOOL_CALL,
                    details={"index": index, "tool_name": name, "open": _ids(open_calls)},
                )
            record["tool_call_id"] = match[0]
            return
        match = next((call for call in open_calls if call[0] == call_id), None)
        if match is None:
            raise InvalidInput(
                f"message {index}: tool_call_id {call_id!r} answers no open assistant tool call",
                code=ErrorCode.UNKNOWN_TOOL_CALL,
                details={"index": index, "tool_call_id": call_id, "open": _ids(open_calls)},
            )
        record.setdefault("tool_name", match[1])
    elif open_calls:
        raise Conflict(
            f"message {index}: the assistant's tool calls {_ids(open_calls)} need their results "
            "before any other message",
            code=ErrorCode.TOOL_RESULTS_PENDING,
            details={"index": index, "open": _ids(open_calls)},
        )


def advance_tool_calls(open_calls: list[list[str]], record: dict[str, Any]) -> None:
    if record["role"] == "tool":
        for i, call in enumerate(open_calls):
            if call[0] == record.get("tool_call_id"):
                del open_calls[i]
                break
    elif record["role"] == "assistant":
        open_calls.extend([c["id"], c["function"]["name"]] for c in record.get("tool_calls") or ())


def _ids(open_calls: list[list[str]]) -> list[str]:
    return [call[0] for call in open_calls]
