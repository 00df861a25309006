"""The two wire protocols the proxy speaks, read into the service's terms and back. Pure.

For each wire: the conversation a request carries (its system prompt apart, its messages in
the service's OpenAI shape), its tool definitions as the service stores them, the request's
own parameters that travel upstream over the assembled payload, and the answer as the
assistant message the service records (text, tool calls, usage).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from app.errors import ErrorCode, InvalidInput, RequestInvalid
from app.messages.native import from_anthropic
from app.messages.schemas import AnthropicMessage, MessageIn

__all__ = [
    "WIRES",
    "Conversation",
    "Wire",
    "WireName",
    "anthropic_reply",
    "openai_reply",
]

WireName = Literal["openai", "anthropic"]

# A message's fields a request means for the model; a client library's answer objects carry
# more (refusal: null, annotations, audio...), which an OpenAI-shaped request need not repeat.
_OPENAI_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")
# What the proxy itself sets in the upstream request; every other key of the incoming request
# (tools, tool_choice, temperature, max_tokens, stop...) goes upstream as the agent sent it.
_SET_BY_PROXY = frozenset({"messages", "system", "stream", "stream_options"})


@dataclass(frozen=True)
class Conversation:
    system: str | None  # the leading system prompt, joined; the task's when the task is new
    messages: list[dict[str, Any]]  # in the service's shape, validated


@dataclass(frozen=True)
class Wire:
    name: WireName

    def conversation(self, body: Mapping[str, Any]) -> Conversation:
        """The system prompt and messages of a request (RequestInvalid when they do not read)."""
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise RequestInvalid(
                [
                    {
                        "type": "missing",
                        "loc": ("body", "messages"),
                        "msg": "a non-empty list of messages is required",
                    }
                ]
            )
        if self.name == "openai":
            system, messages = _openai_messages(raw)
        else:
            system, messages = _anthropic_system(body.get("system")), _anthropic_messages(raw)
            if body.get("system") is not None and not isinstance(body["system"], str | list):
                raise RequestInvalid(
                    [
                        {
                            "type": "type_error",
                            "loc": ("body", "system"),
                            "msg": "system must be a string or a list of text blocks",
                        }
                    ]
                )
        return Conversation(system=system, messages=_validated(messages))

    def model(self, body: Mapping[str, Any]) -> str:
        """The model a request asks for (InvalidInput when it names none)."""
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise InvalidInput(
                "model: the request names no model",
                code=ErrorCode.VALIDATION_ERROR,
                details={"field": "model"},
            )
        return model

    def tools(self, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The request's function tools as the service stores them (OpenAI's definitions)."""
        tools = body.get("tools")
        found: list[dict[str, Any]] = []
        for tool in tools if isinstance(tools, list) else ():
            if not isinstance(tool, dict):
                continue
            if self.name == "openai" and tool.get("type") == "function":
                found.append({"type": "function", "function": tool.get("function")})
            elif self.name == "anthropic" and tool.get("type", "custom") == "custom":
                function = {"name": tool.get("name"), "parameters": tool.get("input_schema")}
                if tool.get("description"):
                    function["description"] = tool["description"]
                found.append({"type": "function", "function": function})
        return found

    def carried(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The request's own parameters, sent upstream over the assembled payload's."""
        return {key: value for key, value in body.items() if key not in _SET_BY_PROXY}

    def max_output_tokens(self, body: Mapping[str, Any]) -> int | None:
        for key in ("max_completion_tokens", "max_tokens"):
            value = body.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    def task_uuid_field(self, body: Mapping[str, Any]) -> Any:
        """Where a request may name its task itself: OpenAI's ``user``, Anthropic's
        ``metadata.user_id`` (a task uuid there names the task)."""
        if self.name == "openai":
            return body.get("user")
        metadata = body.get("metadata")
        return metadata.get("user_id") if isinstance(metadata, dict) else None

    def reply(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        """The upstream's answer as the assistant message the service records."""
        return openai_reply(answer) if self.name == "openai" else anthropic_reply(answer)


WIRES: dict[WireName, Wire] = {
    "openai": Wire("openai"),
    "anthropic": Wire("anthropic"),
}


# -- reading a request's conversation ---------------------------------------------------------


def _openai_messages(raw: list[Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """Leading system (or developer) messages are the system prompt; the rest are kept with
    the fields a request means (a later developer message is a system message)."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for index, message in enumerate(raw):
        if not isinstance(message, dict):
            raise RequestInvalid(
                [
                    {
                        "type": "dict_type",
                        "loc": ("body", "messages", index),
                        "msg": "a message must be an object",
                    }
                ]
            )
        kept = {k: message[k] for k in _OPENAI_FIELDS if message.get(k) is not None}
        if isinstance(kept.get("tool_calls"), list):
            kept["tool_calls"] = [_openai_call(call) for call in kept["tool_calls"]]
        if kept.get("role") == "developer":
            kept["role"] = "system"
        if kept.get("role") == "assistant" and "content" not in kept:
            kept["content"] = None
        if kept.get("role") == "system" and not messages:
            system.append(_text(kept.get("content")))
            continue
        messages.append(kept)
    return ("\n\n".join(system) if system else None), messages


def _openai_call(call: Any) -> Any:
    """A tool call with the fields a request has (an SDK's parsed answer adds its own, such
    as ``parsed_arguments``)."""
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call  # left for validation to refuse
    function = call["function"]
    kept = {k: function[k] for k in ("name", "arguments") if k in function}
    return {k: call[k] for k in ("id", "type") if k in call} | {"function": kept}


def _anthropic_system(system: Any) -> str | None:
    if isinstance(system, str):
        return system or None
    if isinstance(system, list):
        text = "\n\n".join(_text([block]) for block in system if isinstance(block, dict))
        return text or None
    return None


def _anthropic_messages(raw: list[Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for index, posted in enumerate(raw):
        try:
            message = AnthropicMessage.model_validate(posted)
        except ValidationError as exc:
            raise RequestInvalid(_located(exc, index)) from None
        messages.extend(from_anthropic(message))
    return messages


def _validated(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not messages:
        raise InvalidInput(
            "the request holds only a system prompt: at least one user message is needed",
            code=ErrorCode.VALIDATION_ERROR,
            details={},
        )
    validated = []
    for index, message in enumerate(messages):
        try:
            validated.append(MessageIn.model_validate(message).fields())
        except ValidationError as exc:
            raise RequestInvalid(_located(exc, index)) from None
    return validated


def _located(exc: ValidationError, index: int) -> list[dict[str, Any]]:
    return [{**e, "loc": ("body", "messages", index, *e["loc"])} for e in exc.errors()]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


# -- an answer as the message recorded ------------------------------------------------------


def openai_reply(completion: Mapping[str, Any]) -> dict[str, Any]:
    """The assistant message of an OpenAI chat completion (its first choice)."""
    message = completion["choices"][0]["message"]
    calls = [
        {
            "id": call["id"],
            "type": "function",
            "function": {
                "name": call["function"]["name"],
                "arguments": call["function"].get("arguments") or "{}",
            },
        }
        for call in message.get("tool_calls") or ()
        if call.get("type", "function") == "function"
    ]
    content = message.get("content")
    if content is None and message.get("refusal"):
        content = [{"type": "refusal", "refusal": message["refusal"]}]
    return _assistant(content, calls, completion.get("usage"))


def anthropic_reply(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The assistant message of an Anthropic Messages answer: text blocks as text parts,
    tool_use blocks as tool calls (the input as JSON text); thinking blocks are not kept."""
    texts = [
        {"type": "text", "text": block["text"]}
        for block in answer["content"]
        if block.get("type") == "text"
    ]
    calls = [
        {
            "id": block["id"],
            "type": "function",
            "function": {"name": block["name"], "arguments": orjson.dumps(block["input"]).decode()},
        }
        for block in answer["content"]
        if block.get("type") == "tool_use"
    ]
    return _assistant(texts or None, calls, answer.get("usage"))


def _assistant(content: Any, calls: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
    # The service wants content or tool calls on an assistant message: an empty answer is "".
    message: dict[str, Any] = {"role": "assistant", "content": content if content or calls else ""}
    if calls:
        message["tool_calls"] = calls
    counts = (
        {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
        if isinstance(usage, Mapping)
        else {}
    )
    if counts:
        message["usage"] = counts
    return message
