"""What messages, tool definitions and whole payloads cost in tokens.

Overheads follow OpenAI's published accounting for chat messages: a few tokens of framing per
message, one for a name, and a reply primer per payload.
"""

import math
from collections.abc import Mapping
from typing import Any

import orjson

from app.tokens.counters import TextCounter

PER_MESSAGE = 3
PER_NAME = 1
PER_TOOL_CALL = 3
PER_PAYLOAD = 3
PER_TOOL_DEFINITION = 8
IMAGE_WITHOUT_DATA = 300


def content_tokens(counter: TextCounter, content: Any) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return counter.count_text(content)
    total = 0
    for part in content:
        kind = part.get("type")
        if kind == "text":
            total += counter.count_text(part.get("text", ""))
        elif kind == "refusal":
            total += counter.count_text(part.get("refusal", ""))
        elif kind == "image_url":
            total += image_tokens(part.get("image_url", {}).get("url", ""))
        else:  # audio, files: count what they serialise to
            total += counter.count_text(orjson.dumps(part).decode())
    return total


def image_tokens(url: str) -> int:
    """An image by URL: inline data by its size, a flat guess otherwise."""
    if url.startswith("data:") and "," in url:
        return inline_image_tokens(url.split(",", 1)[1])
    return IMAGE_WITHOUT_DATA


def inline_image_tokens(data: str) -> int:
    """Roo Code's estimate of an inline image: the square root of its base64 length."""
    return math.ceil(math.sqrt(len(data)))


def message_tokens(counter: TextCounter, message: Mapping[str, Any]) -> int:
    """Tokens one OpenAI-shaped message adds to a payload."""
    total = PER_MESSAGE + content_tokens(counter, message.get("content"))
    if message.get("name"):
        total += PER_NAME + counter.count_text(message["name"])
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        total += PER_TOOL_CALL + counter.count_text(function.get("name", ""))
        total += counter.count_text(function.get("arguments", ""))
    if message.get("tool_call_id"):
        total += counter.count_text(message["tool_call_id"])
    return total


def tools_tokens(counter: TextCounter, tools: list[dict[str, Any]] | None) -> int:
    if not tools:
        return 0
    return sum(PER_TOOL_DEFINITION + counter.count_text(orjson.dumps(t).decode()) for t in tools)
