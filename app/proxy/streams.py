"""Server-sent event streams of the two wires: cut into events as the bytes come, and summed
up into the answer they stream, in the non-streaming answer's shape. Pure.

The proxy passes each event on as it came (bytes unchanged) and feeds it here; when the stream
ends, :meth:`OpenAIStream.answer` / :meth:`AnthropicStream.answer` give what the non-streaming
call would have answered, which is recorded like one.
"""

import re
from typing import Any

import orjson

__all__ = ["AnthropicStream", "EventSplitter", "OpenAIStream", "event_data"]

_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class EventSplitter:
    """Bytes in, whole events out (each with the blank line that ended it)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        self._pending += chunk
        events: list[bytes] = []
        start = 0
        for match in _BOUNDARY.finditer(self._pending):
            events.append(self._pending[start : match.end()])
            start = match.end()
        self._pending = self._pending[start:]
        return events

    def rest(self) -> bytes:
        """What came after the last whole event (a stream cut short, or no final blank line)."""
        rest, self._pending = self._pending, b""
        return rest


def event_data(event: bytes) -> str | None:
    """The data of an event (its data lines joined by newlines); None when it has none."""
    lines = [
        line[5:].removeprefix(" ")
        for line in event.decode("utf-8", "replace").splitlines()
        if line.startswith("data:")
    ]
    return "\n".join(lines) if lines else None


def _json(event: bytes) -> dict[str, Any] | None:
    data = event_data(event)
    if data is None or data == "[DONE]":
        return None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class OpenAIStream:
    """Chat completion chunks summed up into a chat completion (the first choice).

    ``keep_usage`` False: the agent did not ask for usage, which the proxy asked for anyway
    (to record it); the chunk that carries only the usage is then not passed on.
    """

    def __init__(self, *, keep_usage: bool) -> None:
        self.keep_usage = keep_usage
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.done = False

    def take(self, event: bytes) -> bool:
        """Read one event; whether to pass it on to the agent."""
        data = event_data(event)
        if data == "[DONE]":
            self.done = True
            return True
        chunk = _json(event)
        if chunk is None:
            return True
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._delta(choice.get("delta") or {})
        return self.keep_usage or bool(choices) or "usage" not in chunk

    def _delta(self, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        if isinstance(delta.get("refusal"), str):
            self.refusal.append(delta["refusal"])
        for call in delta.get("tool_calls") or ():
            slot = self.calls.setdefault(
                call.get("index", 0), {"id": "", "name": "", "arguments": []}
            )
            slot["id"] = call.get("id") or slot["id"]
            function = call.get("function") or {}
            slot["name"] = slot["name"] + (function.get("name") or "")
            slot["arguments"].append(function.get("arguments") or "")

    def answer(self) -> dict[str, Any]:
        """The chat completion the chunks make up."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.content) or None,
        }
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": slot["id"],
                    "type": "function",
                    "function": {"name": slot["name"], "arguments": "".join(slot["arguments"])},
                }
                for _, slot in sorted(self.calls.items())
            ]
        return {"choices": [{"index": 0, "message": message}], "usage": self.usage}


class AnthropicStream:
    """Messages stream events summed up into a message: its content blocks (text, and tool_use
    with its input from the JSON deltas) and its usage (input from message_start, output from
    message_delta)."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, list[str]] = {}
        self.usage: dict[str, Any] = {}
        self.done = False

    def take(self, event: bytes) -> bool:
        """Read one event; every event is passed on."""
        data = _json(event)
        if data is None:
            return True
        kind = data.get("type")
        if kind == "message_start":
            message = data.get("message") or {}
            self.usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[data.get("index", 0)] = dict(data.get("content_block") or {})
        elif kind == "content_block_delta":
            self._delta(data.get("index", 0), data.get("delta") or {})
        elif kind == "message_delta":
            self.usage.update(data.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        return True

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        if delta.get("type") == "text_delta":
            block["text"] = block.get("text", "") + str(delta.get("text") or "")
        elif delta.get("type") == "input_json_delta":
            self.partial_json.setdefault(index, []).append(str(delta.get("partial_json") or ""))

    def answer(self) -> dict[str, Any]:
        """The message the events make up."""
        content = []
        for index, block in sorted(self.blocks.items()):
            if block.get("type") == "tool_use":
                raw = "".join(self.partial_json.get(index, []))
                block = block | {"input": orjson.loads(raw) if raw else block.get("input") or {}}
            content.append(block)
        usage = {k: v for k, v in self.usage.items() if v is not None}
        return {"role": "assistant", "content": content, "usage": usage}
