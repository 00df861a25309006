"""Ollama chat (``POST /api/chat``), streamed from OpenAI-shaped lines. Pure.

How an OpenAI message becomes an Ollama message (Ollama's ``docs/api.md`` and ``api/types.go``):

- ``content`` is always a string: text parts joined by newlines. Inline images (data URLs of
  jpeg/png/gif/webp) go to ``images`` as bare base64; other images, audio and files become a
  short text placeholder in the content.
- assistant ``tool_calls`` keep their ``id`` and carry ``arguments`` as a JSON object (see
  :func:`app.formats.parts.parse_arguments` for blank, invalid or non-object ones).
- tool results carry ``tool_name`` (the name of the call they answer, which the renderer
  remembers until the result comes: current.jsonl does not store it) and ``tool_call_id``.
  Ollama does not check pairing, so calls left unanswered at the end are kept.
- ``name`` has no Ollama equivalent and is dropped.

The request: ``options.num_ctx`` is the task's window (the budget assumes it) and
``options.num_predict`` the reserved output; sampling defaults move into ``options``; other
Ollama fields pass through, OpenAI's ``response_format`` becomes ``format``, and ``stream`` is
false unless the defaults say otherwise, so the answer is one JSON object as with the other
formats. Tools keep the OpenAI function shape, which Ollama accepts.

Accounting, in this format's own terms, mirrors OpenAI's over the Ollama message: framing per
message, content, compact JSON arguments, ``tool_name``, ``tool_call_id`` and images as
:mod:`app.tokens.accounting` counts them. A tool result's ``tool_name`` is paid for by the call
it answers, since a result does not know its call's name on its own; the stored sum is thus
exact, and over by a name for each call never answered.
"""

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from app.formats.parts import (
    compact_json,
    content_text,
    data_image,
    output_limit,
    parse_arguments,
    part_text,
    placeholder,
    stand_in,
)
from app.tokens.accounting import (
    PER_MESSAGE,
    PER_PAYLOAD,
    PER_TOOL_CALL,
    inline_image_tokens,
    tools_tokens,
)
from app.tokens.counters import TextCounter

_OPTIONS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "repeat_penalty",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
)
_TOP_LEVEL = ("format", "keep_alive", "think", "stream", "logprobs", "top_logprobs")


def request_tail(
    metadata: dict[str, Any], max_output_tokens: int, context_length: int
) -> dict[str, Any]:
    """Every request field after ``messages``: tools, options and the passed-through defaults."""
    given: dict[str, Any] = {
        k: v for k, v in (metadata.get("request_defaults") or {}).items() if v is not None
    }
    tail: dict[str, Any] = {}
    tools = [convert_tool(tool) for tool in metadata.get("tools") or ()]
    if tools:
        tail["tools"] = tools
    tail["stream"] = False
    tail.update((key, given[key]) for key in _TOP_LEVEL if key in given)
    if "format" not in tail:
        fmt = response_format(given.get("response_format"))
        if fmt is not None:
            tail["format"] = fmt
    options: dict[str, Any] = dict(given.get("options") or {})
    options.update((key, given[key]) for key in _OPTIONS if key in given)
    options["num_predict"] = output_limit(given, max_output_tokens)
    options["num_ctx"] = context_length
    tail["options"] = options
    return tail


def response_format(value: Any) -> Any:
    """OpenAI's response_format as Ollama's format: "json" or a JSON schema."""
    if not isinstance(value, dict):
        return None
    if value.get("type") == "json_object":
        return "json"
    if value.get("type") == "json_schema":
        return value.get("json_schema", {}).get("schema")
    return None


def convert_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool["function"]
    kept = {k: function[k] for k in ("name", "description", "parameters") if k in function}
    return {"type": "function", "function": kept}


def ollama_message(message: dict[str, Any], tool_name: str | None) -> dict[str, Any]:
    """One OpenAI message as Ollama's (``tool_name``: of the call a tool result answers)."""
    role = message.get("role")
    content = message.get("content")
    converted: dict[str, Any] = {"role": role}
    if isinstance(content, list) and role == "user":
        texts: list[str] = []
        images: list[str] = []
        for part in content:
            text = part_text(part)
            if text is not None:
                texts.append(text)
                continue
            url = str(part.get("image_url", {}).get("url", ""))
            inline = data_image(url) if part.get("type") == "image_url" else None
            if inline is not None:
                images.append(inline[1])
            else:
                texts.append(placeholder(part))
        converted["content"] = "\n".join(texts)
        if images:
            converted["images"] = images
    else:
        converted["content"] = content_text(content, non_text=stand_in)
    if role == "assistant" and message.get("tool_calls"):
        converted["tool_calls"] = [_tool_call(call) for call in message["tool_calls"]]
    if role == "tool":
        if tool_name is not None:
            converted["tool_name"] = tool_name
        converted["tool_call_id"] = message.get("tool_call_id", "")
    return converted


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function", {})
    return {
        "id": call.get("id", ""),
        "function": {
            "name": function.get("name", ""),
            "arguments": parse_arguments(function.get("arguments") or ""),
        },
    }


def ollama_message_tokens(counter: TextCounter, message: dict[str, Any]) -> int:
    """What one Ollama message costs (see the module docstring)."""
    total = PER_MESSAGE + counter.count_text(message.get("content", ""))
    total += sum(inline_image_tokens(image) for image in message.get("images") or ())
    for call in message.get("tool_calls") or ():
        function = call["function"]
        total += PER_TOOL_CALL + counter.count_text(function["name"])
        total += counter.count_text(compact_json(function.get("arguments", {})))
    total += counter.count_text(message.get("tool_name", ""))
    return total + counter.count_text(message.get("tool_call_id", ""))


class OllamaRenderer:
    """current.jsonl chunks as the inside of Ollama's ``messages`` array.

    Remembers the names of the calls waiting for results: O(1) in the context's length.
    """

    def __init__(self) -> None:
        self._started = False
        self._names: dict[str, deque[str]] = {}  # call id -> names of its unanswered calls

    def __call__(self, chunk: bytes, last: bool) -> bytes:
        lines = (line for line in chunk.split(b"\n") if line)
        items = [orjson.dumps(self._convert(orjson.loads(line))) for line in lines]
        if not items:
            return b""
        body = b",".join(items)
        if self._started:
            return b"," + body
        self._started = True
        return body

    def _convert(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                name = call.get("function", {}).get("name", "")
                self._names.setdefault(call.get("id", ""), deque()).append(name)
        tool_name = None
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id", "")
            waiting = self._names.get(call_id)
            if waiting:
                tool_name = waiting.popleft()
                if not waiting:
                    del self._names[call_id]
        return ollama_message(message, tool_name)


class OllamaFormat:
    name = "ollama"
    counted_as = "ollama"

    def envelope(
        self, metadata: dict[str, Any], *, max_output_tokens: int, context_length: int
    ) -> tuple[bytes, bytes]:
        prefix = b'{"model":' + orjson.dumps(metadata["config"]["model"]) + b',"messages":['
        tail = request_tail(metadata, max_output_tokens, context_length)
        return prefix, b"]," + orjson.dumps(tail)[1:]  # the tail's "{" becomes the comma

    def renderer(self, metadata: dict[str, Any]) -> Callable[[bytes, bool], bytes]:
        return OllamaRenderer()

    def message_tokens(self, counter: TextCounter, message: dict[str, Any]) -> int:
        """The Ollama message's cost, plus the tool_name each of its calls' results will carry."""
        total = ollama_message_tokens(counter, ollama_message(message, None))
        for call in message.get("tool_calls") or ():
            total += counter.count_text(call.get("function", {}).get("name", ""))
        return total

    def tools_tokens(self, counter: TextCounter, tools: list[dict[str, Any]] | None) -> int:
        return tools_tokens(counter, [convert_tool(tool) for tool in tools or ()])

    def payload_tokens(self, counter: TextCounter, payload: dict[str, Any]) -> int:
        messages = sum(ollama_message_tokens(counter, m) for m in payload["messages"])
        return PER_PAYLOAD + messages + tools_tokens(counter, payload.get("tools"))

    def open_calls_tokens(self, counter: TextCounter, open_calls: Sequence[str]) -> int:
        return 0  # sent as they are (their results' tool_name is paid for already)
