"""Pieces of an OpenAI message that every non-OpenAI format has to translate. Pure."""

from typing import Any

import orjson

from app.json_depth import nests_deeper

# The image types Anthropic accepts inline; Ollama is given the same set, so that a picture
# reaches the model in both formats or in neither.
IMAGE_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

# Where arguments that are not a JSON object go: both Anthropic's tool_use.input and Ollama's
# function.arguments must be objects, and dropping the text would hide what the model said.
RAW_ARGUMENTS_KEY = "_raw_arguments"
# Arguments nested deeper are kept as text too: a payload can nest only so deep before JSON
# encoders (orjson's limit is 255 levels, the whole payload's included) refuse it.
MAX_ARGUMENTS_DEPTH = 64


def data_image(url: str) -> tuple[str, str] | None:
    """(media type, base64 data) of an inline image in an accepted type, else None."""
    if not url.startswith("data:") or "," not in url:
        return None
    header, data = url[5:].split(",", 1)
    media_type, _, encoding = header.partition(";")
    if encoding != "base64" or media_type not in IMAGE_MEDIA_TYPES or not data:
        return None
    return media_type, data


def is_web_url(url: str) -> bool:
    return url.startswith(("https://", "http://"))


def placeholder(part: dict[str, Any]) -> str:
    """A short text standing in for a content part a format cannot carry (never its data)."""
    kind = part.get("type")
    if kind == "image_url":
        url = str(part.get("image_url", {}).get("url", ""))
        if is_web_url(url):
            return f"[image: {url}]"
        media_type = url[5:].split(",", 1)[0].split(";", 1)[0] if url.startswith("data:") else ""
        return f"[image omitted: {media_type or 'unsupported source'}]"
    if kind == "file":
        name = part.get("file", {}).get("filename")
        return f"[file omitted: {name}]" if name else "[file omitted]"
    if kind == "input_audio":
        return "[audio omitted]"
    return f"[{kind or 'content'} omitted]"


def part_text(part: dict[str, Any]) -> str | None:
    """The text of a text or refusal part; None for any other part."""
    if part.get("type") == "text":
        return str(part.get("text", ""))
    if part.get("type") == "refusal":
        return str(part.get("refusal", ""))
    return None


def plain_text(content: Any) -> str:
    """Content as one string: text parts joined by newlines, other parts as placeholders."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(_text_or_placeholder(part) for part in content)


def _text_or_placeholder(part: dict[str, Any]) -> str:
    text = part_text(part)
    return placeholder(part) if text is None else text


def parse_arguments(arguments: str) -> dict[str, Any]:
    """OpenAI's arguments string as a JSON object.

    Blank means no arguments ({}); anything that is not a JSON object (invalid JSON, a list, a
    number, an object nested deeper than ``MAX_ARGUMENTS_DEPTH``) is kept verbatim under
    ``RAW_ARGUMENTS_KEY``.
    """
    if not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {RAW_ARGUMENTS_KEY: arguments}
    if isinstance(parsed, dict) and not nests_deeper(parsed, MAX_ARGUMENTS_DEPTH):
        return parsed
    return {RAW_ARGUMENTS_KEY: arguments}


def output_limit(defaults: dict[str, Any], max_output_tokens: int) -> Any:
    """The answer's token limit: the defaults' max_tokens (or OpenAI's newer name), else the
    output the budget reserves."""
    return defaults.get("max_tokens", defaults.get("max_completion_tokens", max_output_tokens))


def compact_json(value: Any) -> str:
    return orjson.dumps(value).decode()
