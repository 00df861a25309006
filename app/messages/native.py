"""Messages posted in a provider's own shape, read into the service's (OpenAI's). Pure.

``POST /messages`` takes a message or a batch in OpenAI's chat shape (the service's own), in
Anthropic's Messages shape or in Ollama's chat shape. ``?input=`` names the shape; without it
the body is read by what it shows (:func:`detect`):

- Anthropic: a content block of a type only Anthropic has (``tool_use``, ``tool_result``,
  ``image``, ``document``, ``thinking``...), or ``"type": "message"`` (a response object).
- Ollama: ``images`` on a message, tool call arguments given as a JSON object, or the
  response's ``prompt_eval_count`` / ``eval_count`` beside a message.
- OpenAI: a content part only OpenAI has (``image_url``, ``input_audio``, ``file``,
  ``refusal``) or tool call arguments given as JSON text.

A body showing one provider's marks is read as that provider's; one showing none is read as
OpenAI's (plain text messages mean the same in all three); one showing two providers' marks is
refused as ambiguous (422 ``ambiguous_input_format``), naming what it found where.

What a conversion keeps, and the few things it changes (docs/input-formats.md lists them):

- Anthropic ``tool_use`` blocks become ``tool_calls`` with their ids and names, the input as
  compact JSON text; ``tool_result`` blocks become tool messages answering ``tool_use_id``;
  ``is_error`` is kept on the tool message (in the history only: neither OpenAI nor Ollama
  has such a flag). A user message holding results and other blocks becomes the tool
  messages, then one user message with the rest: an image inside a result moves there too
  (OpenAI's tool messages carry text only). Images become ``image_url`` parts (a data URL, or
  the http(s) URL). ``cache_control`` and ``citations`` are not kept.
- Ollama ``images`` (bare base64; the type read from the data) become ``image_url`` data URL
  parts after the text; object arguments become JSON text; a call without an id gets one
  derived from the message (the same for the same message, so a retried POST is the same
  request); a result naming only ``tool_name`` answers the oldest open call of that name
  (the store pairs it); ``prompt_eval_count`` / ``eval_count`` move into ``usage``.
- Fields a format does not name are kept as posted (on the first message a posted one
  becomes), as for OpenAI's.
"""

import hashlib
from collections.abc import Sequence
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from app.errors import ErrorCode, InvalidInput, RequestInvalid
from app.formats.parts import image_media_type
from app.messages.schemas import (
    AnthropicBatch,
    AnthropicBlock,
    AnthropicImageBlock,
    AnthropicMessage,
    AnthropicToolResultBlock,
    MessageBatch,
    MessageIn,
    OllamaBatch,
    OllamaMessage,
)

InputFormat = Literal["openai", "anthropic", "ollama"]

PROVIDER_NAMES: dict[str, str] = {"openai": "OpenAI", "anthropic": "Anthropic", "ollama": "Ollama"}

# Content block and part types only one provider has.
_ANTHROPIC_BLOCKS = frozenset(
    {
        "tool_use",
        "tool_result",
        "image",
        "document",
        "thinking",
        "redacted_thinking",
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
    }
)
_OPENAI_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})

_BODY_SHAPE = 'one message ({"role": ..., "content": ...}) or a batch ({"messages": [...]})'

Message = dict[str, Any]
Evidence = dict[str, str]  # format -> where the body shows it ("message 0 has a tool_use block")


# -- reading a body -------------------------------------------------------------------------


def read_body(body: Any, input_format: InputFormat | None) -> list[MessageIn]:
    """The messages of a POST /messages body, in the service's shape, in order.

    ``input_format`` None: detected. Raises RequestInvalid (422; for a detected format, naming
    it and why) or InvalidInput (not an object; ambiguous; named as one format and showing
    another's marks, naming the ``?input=`` that fits).
    """
    if not isinstance(body, dict):
        raise InvalidInput(
            f"the body must be a JSON object: {_BODY_SHAPE}; got {_json_type(body)}",
            code=ErrorCode.VALIDATION_ERROR,
            details={"expected": "object", "got": _json_type(body)},
        )
    batch = "messages" in body
    posted = body["messages"] if batch and isinstance(body["messages"], list) else [body]
    evidence = detect(posted)
    if input_format is not None:
        _refuse_foreign(input_format, evidence)
    chosen = input_format or _detected(evidence)
    hint = None if input_format is not None else _hint(chosen, evidence)
    try:
        if chosen == "openai":  # the service's own shape: nothing to convert
            return (
                MessageBatch.model_validate(body).messages
                if batch
                else [MessageIn.model_validate(body)]
            )
        converted = _converted(body, batch, chosen)
    except ValidationError as exc:
        raise RequestInvalid(_in_body(exc.errors()), hint=hint) from None
    try:
        return [MessageIn.model_validate(message) for message in converted]
    except ValidationError as exc:  # a conversion whose result the service cannot take
        raise RequestInvalid(_in_body(exc.errors(), "converted"), hint=hint) from None


def _converted(body: dict[str, Any], batch: bool, chosen: InputFormat) -> list[Message]:
    """The posted messages validated in Anthropic's or Ollama's shape, and converted."""
    if chosen == "anthropic":
        anthropic = (
            AnthropicBatch.model_validate(body).messages
            if batch
            else [AnthropicMessage.model_validate(body)]
        )
        return [converted for posted in anthropic for converted in from_anthropic(posted)]
    ollama = (
        OllamaBatch.model_validate(body).messages if batch else [OllamaMessage.model_validate(body)]
    )
    return [from_ollama(posted) for posted in ollama]


def _in_body(errors: Sequence[Any], *prefix: str) -> list[dict[str, Any]]:
    return [{**error, "loc": ("body", *prefix, *error["loc"])} for error in errors]


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"


# -- detection ------------------------------------------------------------------------------


def detect(messages: Sequence[Any]) -> Evidence:
    """For each provider whose marks the posted messages show, the first place it shows them."""
    found: Evidence = {}
    for index, message in enumerate(messages):
        if isinstance(message, dict):
            for fmt, mark in _marks(message):
                found.setdefault(fmt, f"message {index} has {mark}")
    return found


def _marks(message: dict[str, Any]) -> list[tuple[str, str]]:
    marks: list[tuple[str, str]] = []
    content = message.get("content")
    for part in content if isinstance(content, list) else ():
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):  # left for validation to refuse
            continue
        if kind in _ANTHROPIC_BLOCKS:
            marks.append(("anthropic", f"a {kind} block"))
        elif kind in _OPENAI_PARTS:
            marks.append(("openai", f"an {kind} part" if kind[0] in "aeiou" else f"a {kind} part"))
    if message.get("type") == "message":
        marks.append(("anthropic", '"type": "message"'))
    if "images" in message:
        marks.append(("ollama", "images"))
    for key in ("prompt_eval_count", "eval_count"):
        if key in message:
            marks.append(("ollama", key))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, dict):
            marks.append(("ollama", "tool call arguments as an object"))
        elif isinstance(arguments, str):
            marks.append(("openai", "tool call arguments as JSON text"))
    return marks


def _detected(evidence: Evidence) -> InputFormat:
    if len(evidence) > 1:
        marks = "; ".join(f"{evidence[fmt]} ({PROVIDER_NAMES[fmt]})" for fmt in sorted(evidence))
        raise InvalidInput(
            f"the body mixes the shapes of several providers: {marks}; post each provider's "
            "messages on their own, with ?input=openai, ?input=anthropic or ?input=ollama",
            code=ErrorCode.AMBIGUOUS_INPUT_FORMAT,
            details={"evidence": evidence},
        )
    if "anthropic" in evidence:
        return "anthropic"
    return "ollama" if "ollama" in evidence else "openai"


def _refuse_foreign(named: InputFormat, evidence: Evidence) -> None:
    """A body named as one format that shows another's marks: their fields would be kept as
    unknown extras, not read, so it is refused, naming the format it looks like."""
    other = next((fmt for fmt in sorted(evidence) if fmt != named), None)
    if other is not None:
        raise InvalidInput(
            f"{evidence[other]}, which {PROVIDER_NAMES[named]}'s shape does not have: this "
            f"looks like an {PROVIDER_NAMES[other]} message; post it with ?input={other}",
            code=ErrorCode.VALIDATION_ERROR,
            details={"input": named, "looks_like": other, "evidence": evidence},
        )


def _hint(chosen: InputFormat, evidence: Evidence) -> str | None:
    """What a validation error of a detected format adds: which it was read as, and why."""
    if chosen == "openai":
        return None
    return (
        f"read as an {PROVIDER_NAMES[chosen]} message because {evidence[chosen]}; "
        "name the format with ?input= to read it as another"
    )


# -- Anthropic ------------------------------------------------------------------------------


def from_anthropic(message: AnthropicMessage) -> list[Message]:
    """One Anthropic message as the service's messages: an assistant message as one; a user
    message as a tool message per tool_result, then a user message for its other blocks."""
    extras = dict(message.model_extra or {})
    if message.role == "assistant":
        return [{**_anthropic_assistant(message), **extras}]
    if isinstance(message.content, str):
        return [{"role": "user", "content": message.content, **extras}]
    results = [b for b in message.content if isinstance(b, AnthropicToolResultBlock)]
    converted: list[Message] = [_tool_message(result) for result in results]
    moved = [  # images inside results: OpenAI's tool messages carry text only
        _image_part(part)
        for result in results
        if isinstance(result.content, list)
        for part in result.content
        if isinstance(part, AnthropicImageBlock)
    ]
    rest = [_user_part(b) for b in message.content if not isinstance(b, AnthropicToolResultBlock)]
    if moved or rest:
        converted.append({"role": "user", "content": moved + rest})
    converted[0].update(extras)
    return converted


def _anthropic_assistant(message: AnthropicMessage) -> Message:
    converted: Message = {"role": "assistant"}
    if isinstance(message.content, str):
        converted["content"] = message.content
    else:
        texts = [{"type": "text", "text": b.text} for b in message.content if b.type == "text"]
        converted["content"] = texts or None
        calls = [
            {
                "id": b.id,
                "type": "function",
                "function": {"name": b.name, "arguments": orjson.dumps(b.input).decode()},
            }
            for b in message.content
            if b.type == "tool_use"
        ]
        if calls:
            converted["tool_calls"] = calls
    if message.usage is not None:
        converted["usage"] = message.usage.model_dump(exclude_none=True)
    return converted


def _tool_message(result: AnthropicToolResultBlock) -> Message:
    content: str | list[dict[str, Any]]
    if isinstance(result.content, list):
        content = [{"type": "text", "text": p.text} for p in result.content if p.type == "text"]
    else:
        content = result.content or ""
    converted: Message = {
        "role": "tool",
        "tool_call_id": result.tool_use_id,
        "content": content or "",
    }
    if result.is_error is not None:
        converted["is_error"] = result.is_error
    return converted


def _user_part(block: AnthropicBlock) -> dict[str, Any]:
    if block.type == "text":
        return {"type": "text", "text": block.text}
    assert isinstance(block, AnthropicImageBlock)  # the role rules leave nothing else
    return _image_part(block)


def _image_part(block: AnthropicImageBlock) -> dict[str, Any]:
    source = block.source
    if source.type == "base64":
        url = f"data:{source.media_type};base64,{source.data}"
    else:
        url = source.url
    return {"type": "image_url", "image_url": {"url": url}}


# -- Ollama ---------------------------------------------------------------------------------


def from_ollama(message: OllamaMessage) -> Message:
    """One Ollama message as the service's."""
    converted: Message = {"role": message.role}
    text = message.content or ""
    if message.images:
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        converted["content"] = parts + [_ollama_image(image) for image in message.images]
    else:
        converted["content"] = text
    if message.tool_calls:
        converted["tool_calls"] = [
            {
                "id": call.id or _derived_id(message, index),
                "type": "function",
                "function": {
                    "name": call.function.name,
                    "arguments": orjson.dumps(call.function.arguments).decode(),
                },
            }
            for index, call in enumerate(message.tool_calls)
        ]
    for key in ("tool_call_id", "tool_name"):
        if getattr(message, key) is not None:
            converted[key] = getattr(message, key)
    usage = message.usage.model_dump(exclude_none=True) if message.usage else {}
    for key in ("prompt_eval_count", "eval_count"):
        if getattr(message, key) is not None:
            usage[key] = getattr(message, key)
    if usage:
        converted["usage"] = usage
    return converted | dict(message.model_extra or {})


def _derived_id(message: OllamaMessage, index: int) -> str:
    """An id for a call posted without one: the same for the same message (a retried POST is
    the same request), different for each call of it."""
    posted = orjson.dumps(message.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(posted + b"#" + str(index).encode()).hexdigest()
    return f"call_{digest[:24]}"


def _ollama_image(data: str) -> dict[str, Any]:
    media_type = image_media_type(data)
    assert media_type is not None  # OllamaMessage takes no other image
    return {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}}
