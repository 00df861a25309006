"""Answering the model's ``context_expand`` calls (a task created with ``expand_tool=True``).

A masked tool result's placeholder ("[output of read_file(...) hidden: 412 lines, 18.3 KB, seq
57]") and an elision's note ("[... 12,345 characters elided to fit the context window (seq 57,
chars 2,000-14,345) ...]") name what they hide. The model asks for it with
``context_expand(seq, start, end, max_bytes)``; the answer is the text from ``GET
/tasks/{uuid}/messages/{seq}``, posted as an ordinary tool result (counted and compacted like
any other). A call the service refuses (an unknown seq, a range outside the text, arguments
that are not integers) is answered too, with the reason: every tool call needs its result, and
the model can correct itself. Pure.
"""

import json
from collections.abc import Mapping
from typing import Any

from context_client._calls import QueryValue
from context_client.errors import APIError
from context_client.types import ChatMessage, MessageText

__all__ = ["EXPAND_TOOL_NAME", "expand_query", "expand_refusal", "expand_result_message"]

EXPAND_TOOL_NAME = "context_expand"
# What the service refuses in a call's arguments: the model's mistake, answered to the model.
_REFUSALS = frozenset({"message_not_found", "invalid_range", "validation_error"})


def expand_query(tool_call: Mapping[str, Any]) -> tuple[str, dict[str, QueryValue]]:
    """The seq (as the model gave it: the service checks it) and the query of a call in
    OpenAI's shape (``RecordedReply.tool_calls`` holds every provider's calls so)."""
    function = tool_call["function"]
    if function.get("name") != EXPAND_TOOL_NAME:
        raise ValueError(f"not a {EXPAND_TOOL_NAME} call: {function.get('name')!r}")
    raw = function.get("arguments") or "{}"
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (json.JSONDecodeError, TypeError, ValueError):
        arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    query: dict[str, QueryValue] = {}
    for name in ("start", "end", "max_bytes"):
        value = arguments.get(name)
        if value is not None:
            query[name] = value if isinstance(value, int | float | str) else json.dumps(value)
    return str(arguments.get("seq", "missing")), query


def expand_result_message(tool_call: Mapping[str, Any], answer: MessageText) -> ChatMessage:
    """The tool result: the text, under a line saying which range of which seq it is, and
    where to go on when max_bytes cut it."""
    seq, start, end = answer["seq"], answer["start"], answer["end"]
    lines = [f"[seq {seq}, chars {start:,}-{end:,} of {answer['total_chars']:,}]", answer["text"]]
    if answer["next_start"] is not None:
        lines.append(
            f"[cut at max_bytes: call {EXPAND_TOOL_NAME} with seq={seq}, "
            f"start={answer['next_start']} for the rest]"
        )
    return _result(tool_call, "\n".join(lines))


def expand_refusal(tool_call: Mapping[str, Any], error: APIError) -> ChatMessage | None:
    """The tool result for a call the service refused because of its arguments; None for any
    other error (an unknown task, an unreachable service: the agent's problem, not the
    model's)."""
    if error.code not in _REFUSALS:
        return None
    return _result(tool_call, f"[{EXPAND_TOOL_NAME} failed: {error.message}]")


def _result(tool_call: Mapping[str, Any], content: str) -> ChatMessage:
    return {
        "role": "tool",
        "tool_call_id": tool_call["id"],
        "tool_name": EXPAND_TOOL_NAME,
        "content": content,
    }
