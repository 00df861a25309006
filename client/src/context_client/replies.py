"""An LLM's answer as the assistant message the service stores: OpenAI's chat shape, with the
tool calls and the call's ``usage`` (which the service counts as an LLM call and its tokens, and
uses to calibrate its token counts).

Each converter takes the answer as the provider's SDK returns it (a pydantic model) or as its
JSON (a mapping). What the chat shape cannot hold is left out: Anthropic's thinking blocks and
server tool blocks, Ollama's ``thinking``. A kind of tool call other than a function call is an
error rather than a silent loss (the model would wait for a result that never comes).
"""

import json
import uuid
from collections.abc import Mapping
from typing import Any, Protocol

from context_client.types import ChatMessage, ToolCall

__all__ = ["SupportsModelDump", "anthropic_reply", "ollama_reply", "openai_reply"]

_OLLAMA_USAGE = ("prompt_eval_count", "eval_count")


class SupportsModelDump(Protocol):
    """A pydantic model, as the OpenAI and Anthropic SDKs return."""

    def model_dump(self, *, mode: str = ...) -> dict[str, Any]: ...


Answer = Mapping[str, Any] | SupportsModelDump


def openai_reply(completion: Answer, choice: int = 0) -> ChatMessage:
    """The assistant message of an OpenAI ``ChatCompletion`` (or of an OpenAI-compatible
    server's answer: LM Studio, vLLM...)."""
    data = _as_dict(completion)
    message = data["choices"][choice]["message"]
    calls: list[ToolCall] = []
    for call in message.get("tool_calls") or ():
        kind = call.get("type", "function")
        if kind != "function":
            raise ValueError(f"a {kind!r} tool call has no place in the chat shape")
        function = call["function"]
        calls.append(_tool_call(call["id"], function["name"], function["arguments"]))
    content: Any = message.get("content")
    if content is None and message.get("refusal"):
        content = [{"type": "refusal", "refusal": message["refusal"]}]
    return _assistant(content, calls, data.get("usage"))


def anthropic_reply(message: Answer) -> ChatMessage:
    """The assistant message of an Anthropic ``Message``: its text blocks joined, its
    ``tool_use`` blocks as tool calls (the input as JSON text)."""
    data = _as_dict(message)
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in data["content"]:
        if block["type"] == "text":
            texts.append(block["text"])
        elif block["type"] == "tool_use":
            calls.append(_tool_call(block["id"], block["name"], json.dumps(block["input"])))
    return _assistant("".join(texts) if texts else None, calls, data.get("usage"))


def ollama_reply(response: Mapping[str, Any]) -> ChatMessage:
    """The assistant message of an Ollama ``/api/chat`` answer (``stream: false``). Ollama's
    calls may have no id: each gets a new one, for its result to name."""
    message = response["message"]
    calls = [
        _tool_call(
            call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
            call["function"]["name"],
            _arguments_text(call["function"].get("arguments")),
        )
        for call in message.get("tool_calls") or ()
    ]
    usage = {key: response[key] for key in _OLLAMA_USAGE if key in response}
    return _assistant(message.get("content") or None, calls, usage)


def _assistant(content: Any, calls: list[ToolCall], usage: Any) -> ChatMessage:
    # The service wants content or tool calls on an assistant message: an empty answer is "".
    message: ChatMessage = {"role": "assistant", "content": content if content or calls else ""}
    if calls:
        message["tool_calls"] = calls
    counts = _counts(usage)
    if counts:
        message["usage"] = counts
    return message


def _tool_call(call_id: str, name: str, arguments: str) -> ToolCall:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _counts(usage: Any) -> dict[str, int]:
    """The usage's token counts (its nested details and nulls left out)."""
    if not isinstance(usage, Mapping):
        return {}
    return {
        key: value
        for key, value in usage.items()
        if isinstance(value, int) and not isinstance(value, bool)
    }


def _as_dict(answer: Answer) -> dict[str, Any]:
    if isinstance(answer, Mapping):
        return dict(answer)
    return answer.model_dump(mode="json")
