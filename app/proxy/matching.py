"""Which messages of a resent conversation are new. Pure.

An agent on the OpenAI or Anthropic wire resends its whole conversation every turn. Each
message, in the service's (OpenAI's) shape, gets a hash of what it means to the model,
normalised so that the same message resent by another client library hashes the same:
content None and "" are equal, text parts are joined, tool call arguments are parsed and
dumped again with sorted keys, and fields that only describe an answer (usage, refusal: null,
annotations...) are left out. The stored conversation is compared with the incoming one by
these hashes, in order.
"""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["Sync", "compare", "message_hash"]


def message_hash(message: dict[str, Any]) -> str:
    """The hash of a message as it matters to a conversation."""
    meaning: dict[str, Any] = {
        "role": message.get("role"),
        "content": _content(message.get("content")),
    }
    for key in ("name", "tool_call_id"):
        if message.get(key) is not None:
            meaning[key] = message[key]
    calls = message.get("tool_calls") or []
    if calls:
        meaning["tool_calls"] = [_call(call) for call in calls]
    data = orjson.dumps(meaning, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()


def _content(content: Any) -> Any:
    """Text as one string (None is ""); a part that is not text stays, keys sorted."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        return content
    texts: list[str] = []
    others: list[Any] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            texts.append(str(part.get("text") or ""))
        else:
            others.append(part)
    return "".join(texts) if not others else ["".join(texts), *others]


def _call(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    function = call.get("function") or {}
    return {
        "id": call.get("id"),
        "name": function.get("name"),
        "arguments": _arguments(function.get("arguments")),
    }


def _arguments(arguments: Any) -> Any:
    """Arguments as JSON text with sorted keys, however they were spaced or ordered."""
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments or "{}")
        except orjson.JSONDecodeError:
            return arguments  # not JSON: compared as it is
    return orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()


@dataclass(frozen=True)
class Sync:
    """How an incoming conversation relates to the stored one.

    ``common``: how many messages both begin with. ``diverged``: the stored conversation has
    messages past ``common`` that the incoming one does not (edited, dropped, or a reply the
    agent never got): those leave the context before the incoming rest is appended.
    """

    common: int
    diverged: bool


def compare(stored: Sequence[str], incoming: Sequence[str]) -> Sync:
    """Compare two conversations by their messages' hashes."""
    common = 0
    for have, given in zip(stored, incoming, strict=False):
        if have != given:
            break
        common += 1
    return Sync(common=common, diverged=common < len(stored))
